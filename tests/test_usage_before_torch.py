"""A usage error is one line before torch is imported (#49: they took 3-6 s): each command's
bad argument, in a fresh interpreter, leaves torch unimported (a fact, not a timing)."""
from __future__ import annotations

import json
import subprocess
import sys

BAD = [
    ["sweep", "--batch", "x"], ["predict", "--batch", "x"], ["predict", "--target", "nope"],
    ["predict", "--model", "nope"], ["fit", "--context", "x"], ["fit", "--budget", "80"],
    ["fit", "--headroom", "120%"], ["fit", "--model", "gpt2", "--context", "x"], ["explain", "--ce-chunk", "x"],
    ["verify", "--vocab", "x"], ["check", "a.csv", "--mem-tol", "x"], ["sweep", "--variant", "nope"],
]
SCRIPT = """
import json, sys
from typer.testing import CliRunner
from cebench.cli import app
found = []
for argv in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, argv)
    found.append([result.exit_code, result.stderr.strip().splitlines(), "torch" in sys.modules])
print(json.dumps(found))
"""


def test_a_bad_argument_is_one_line_before_torch_is_imported(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(BAD)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    for argv, (code, lines, imported) in zip(BAD, json.loads(done.stdout), strict=True):
        assert code == 2 and len(lines) == 1 and lines[0].startswith("cebench: error: "), (argv, lines)
        assert not imported, f"cebench {' '.join(argv)} imported torch before refusing its argument"
