# Two commands a newcomer runs on a fresh machine:
#   make demo   translate with the shipped model through the CLI (runtime only: no torch)
#   make test   the whole test suite (installs the train and test extras)
# Each creates or reuses its own virtual environment and installs what it needs.

PYTHON     ?= python3
DEV_VENV   ?= .venv
RT_VENV    ?= .venv-runtime
TORCH_PIN  := torch==2.13.0
PIP_FLAGS  ?= -q --disable-pip-version-check
# a CPU build of torch first on Linux x86_64: an unpinned torch pulls a multi-GB CUDA build
IS_LINUX_X86 := $(shell [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ] && echo yes)

.PHONY: demo test install-runtime install-dev numbers-model bench clean

$(DEV_VENV)/bin/python:
	$(PYTHON) -m venv $(DEV_VENV)

$(RT_VENV)/bin/python:
	$(PYTHON) -m venv $(RT_VENV)

install-dev: $(DEV_VENV)/bin/python
ifeq ($(IS_LINUX_X86),yes)
	$(DEV_VENV)/bin/pip install $(PIP_FLAGS) $(TORCH_PIN)
endif
	$(DEV_VENV)/bin/pip install $(PIP_FLAGS) ".[train,test]"

install-runtime: $(RT_VENV)/bin/python
	$(RT_VENV)/bin/pip install $(PIP_FLAGS) .

test: install-dev
	cd tests && ../$(DEV_VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

demo: install-runtime
	@bash scripts/demo.sh $(RT_VENV)

# Reproduce models/numbers-en-de from nothing (data, training, export, evaluation): tens of minutes.
numbers-model: install-dev
	@bash scripts/make_numbers_model.sh $(DEV_VENV)

bench: install-dev
	$(DEV_VENV)/bin/pip install $(PIP_FLAGS) ".[bench]"
	$(DEV_VENV)/bin/python bench/run.py

clean:
	rm -rf $(DEV_VENV) $(RT_VENV) build *.egg-info .pytest_cache
