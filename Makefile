# cebench: `make sweep` measures the default grid, `make test` runs the test suite.
# Both create .venv on first use. The venv sees the system's site-packages, so a torch
# that is already installed (a CUDA build, say) is kept; where there is no torch at all,
# the CPU build torch==2.13.0 is installed before cebench (never an unpinned CUDA build).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0
ARGS ?=

.PHONY: install sweep test clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_CPU)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

sweep: install
	$(VENV)/bin/cebench sweep --vocab 50257 $(ARGS)

test: install
	$(PY) -m pytest $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache *.egg-info
