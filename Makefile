# cebench: `make sweep` measures the default grid, `make test` runs the quick suite (every test but those
# that take seconds each by nature, marked `slow` or `compile` in pyproject.toml: about 3 minutes on 2 cores),
# `make test-all` runs every test (what CI runs), `make lint` runs ruff and mypy,
# `make gate` fails when the loss's peak memory grew against results/baseline.csv
# (`make baseline` regenerates that file, on purpose only), `make docs` (or `make figures`)
# regenerates every output block, figure and generated table of README.md and results/README.md.
# Each creates .venv on first use. The venv sees the system's site-packages, so a torch
# that is already installed (a CUDA build, say) is kept; where there is no torch at all,
# the CPU build torch==2.13.0 is installed before cebench (never an unpinned CUDA build).
# `make install` (which every target runs) also installs the peers: Liger-Kernel, Cut Cross-Entropy
# and, where none is importable, Triton (Linux only: it publishes no other wheels), all with --no-deps
# (their own requirements would pull an unpinned torch): cebench predicts both on meta anywhere and
# runs Liger's kernels on this CPU under Triton's interpreter; and transformers (cebench[hf], which
# needs no torch of its own) for the `hf:` models. Their releases are declared once, in
# cebench/core/pins.py (a missing peer's message names the same); `make install-peers` is `make install`.
# The tests that reproduce published figures install the older Liger releases that measured
# them themselves, --no-deps, into a cache reused by later runs (tests/peer_releases.py).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0
PINS := $(shell $(PYTHON) cebench/core/pins.py)
TRITON ?= $(filter triton==%,$(PINS))
LIGER ?= $(filter liger-kernel==%,$(PINS))
CCE ?= $(filter cut-cross-entropy==%,$(PINS))
TRANSFORMERS ?= $(filter transformers==%,$(PINS))
ARGS ?=
# What `make test` leaves out (`make test-all` runs them too); a later -m in ARGS replaces it.
QUICK := -m "not slow and not compile"
# The gate's grid: eager variants on CPU, tiny shapes (seconds), one pinned thread.
# CPU allocator bytes are deterministic for a given torch, hence a 0 % tolerance.
GATE_GRID := --device cpu --variant dense,chunked --batch 1,4 --context 64 --vocab 4096 \
             --d-model 32 --ce-chunk 64 --warmup 1 --repeats 1 --threads 1
BASELINE ?= results/baseline.csv

.PHONY: install install-peers sweep test test-all lint types gate baseline docs figures clean

install: $(VENV)/.installed $(VENV)/.peers

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_CPU)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

sweep: install
	$(VENV)/bin/cebench sweep --vocab 50257 $(ARGS)

$(VENV)/.peers: $(VENV)/.installed cebench/core/pins.py
	@test -n "$(TRITON)" -a -n "$(LIGER)" -a -n "$(CCE)" -a -n "$(TRANSFORMERS)" || \
	  { echo "make: no pins from $(PYTHON) cebench/core/pins.py"; exit 1; }
	$(PY) -c "import triton" 2>/dev/null || [ "$$(uname -s)" != Linux ] || \
	  $(PY) -m pip install --quiet --no-deps "$(TRITON)"
	$(PY) -m pip install --quiet --no-deps "$(LIGER)" "$(CCE)"
	$(PY) -m pip install --quiet "$(TRANSFORMERS)"
	touch $@

install-peers: install

test: install
	$(PY) -m pytest $(QUICK) $(ARGS)

test-all: install
	$(PY) -m pytest $(ARGS)

lint: install
	$(VENV)/bin/ruff check cebench tests results
	$(VENV)/bin/mypy

# The typed class statements of Config's and Result's fields, written from the axes and columns.
types: install
	$(PY) -c "from cebench.core.generated import main; main()"

# ARGS go to `cebench check` here (e.g. ARGS=--json).
gate: install
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(VENV)/bin/cebench sweep $(GATE_GRID) --out "$$tmp/gate.csv" && \
	$(VENV)/bin/cebench check "$$tmp/gate.csv" --baseline $(BASELINE) --mem-tol 0% $(ARGS)

baseline: install
	rm -f $(BASELINE)
	$(VENV)/bin/cebench sweep $(GATE_GRID) --out $(BASELINE)

# Every output block, figure and generated table the READMEs show, run again (minutes; on a quiet machine:
# the blocks hold measured times). `make docs ARGS=--blocks` reruns the output blocks alone.
docs: install
	$(PY) results/docs.py $(ARGS)

figures: docs

clean:
	rm -rf $(VENV) .pytest_cache *.egg-info
