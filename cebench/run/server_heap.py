"""What the forkserver of `cebench.run.isolate` imports once, before it forks any point's
process: torch and Dynamo (seconds each, which every point would pay again), then its heap
frozen for good (`devices.freeze_for_good`), so that a point's collections walk only what the
point made, not the ~300,000 objects of those imports (0.2 s a collection, 2 to 4 a point),
and touch none of the pages its fork shares with the server."""
from __future__ import annotations

from cebench.core import devices
from cebench.shims import torch_names

torch_names.import_dynamo()
devices.freeze_for_good()
