# Two commands a newcomer runs on a fresh machine:
#   make demo   translate with the shipped model through the CLI (runtime only: no torch)
#   make test   the whole test suite (installs the train and test extras at the locked versions)
# Each creates or reuses its own virtual environment and installs what it needs.
#
# Versions: constraints.txt locks every package development, tests, CI and the benchmarks install
# (pip's own constraints: `pip install -c constraints.txt`); `make lock` regenerates it from the
# ranges in pyproject.toml. The ranges themselves are tested at both ends: `make test-latest`
# (newest versions, no lock) and `make test-oldest` (the lowest versions the ranges allow for the
# runtime's dependencies: numpy, tokenizers, onnxruntime).

PYTHON     ?= python3
DEV_VENV   ?= .venv
RT_VENV    ?= .venv-runtime
LOCK       := constraints.txt
PIP_FLAGS  ?= -q --disable-pip-version-check
PYTEST      = cd tests && ../$(1)/bin/python -m pytest -q $(PYTEST_ARGS)
# torch, alone and first, at the lock's version, from PyPI: on Linux x86_64 that is the CUDA build (several GB).
# TORCH_INDEX_URL names one more index for it; PyTorch's CPU builds (~190 MB) are on
#   make test TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The lock pins the public version (torch==X), which a CPU build X+cpu meets, and pip prefers it where it finds one
# (that index, or a local wheel in pip's find-links)
TORCH_INDEX_URL ?=
INSTALL_TORCH = $(1)/bin/pip install $(PIP_FLAGS) -c $(LOCK) $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL)) torch

.PHONY: demo test test-latest test-oldest versions lock install-runtime install-dev numbers-model bench clean chromium schema

$(DEV_VENV)/bin/python:
	$(PYTHON) -m venv $(DEV_VENV)

$(RT_VENV)/bin/python:
	$(PYTHON) -m venv $(RT_VENV)

install-dev: $(DEV_VENV)/bin/python
	$(call INSTALL_TORCH,$(DEV_VENV))
	$(DEV_VENV)/bin/pip install $(PIP_FLAGS) -c $(LOCK) ".[train,convert,serve,test,ray]"

# docs/manifest.schema.json and web/src/manifest_schema.js from the manifest's records
# (runtime/package/manifest_records.py); tests/runtime/package/test_manifest.py fails while they differ
schema:
	$(DEV_VENV)/bin/python -m seq2onnx.runtime.package.schema .

install-runtime: $(RT_VENV)/bin/python
	$(RT_VENV)/bin/pip install $(PIP_FLAGS) -c $(LOCK) .

# Three streams at once, as CI has two cores and each stream keeps about one busy: the Python suite; the web
# suite, then Python tests that need no trained model (SIDE_TESTS: the server's, the Ray cluster's, the wheel's),
# as many as make both streams end together: one run's per-file times here (low load, both pytest streams at once)
# add up to ~640 s for the Python suite without them and ~215 s for them, after the web suite's ~536 s on CI. The
# other streams' output follows the Python suite's; the target fails if any fails. `make test-suites` runs them
# without installing.
SIDE_TESTS = runtime/serve/test_serve.py runtime/serve/test_serve_invariance.py runtime/serve/test_serve_hardening.py \
             runtime/documents/test_documents.py runtime/documents/test_document_files.py \
             runtime/package/test_languages.py runtime/ray/test_ray.py test_packaging.py
test: chromium install-dev test-suites

test-suites: lint
	@$(PYTHON) scripts/versions.py $(DEV_VENV)
	cd web && npm ci
	@log=$$(mktemp); ( ( $(WEB_RUN) ); w=$$?; ( $(call PYTEST,$(DEV_VENV)) $(SIDE_TESTS) ); c=$$?; \
	    echo "--- web/: npm test exit $$w; tests/: $(SIDE_TESTS) exit $$c ---"; test $$w -eq 0 && test $$c -eq 0 \
	  ) > $$log 2>&1 & other=$$!; \
	  ( $(call PYTEST,$(DEV_VENV)) $(addprefix --ignore=,$(SIDE_TESTS)) ); py=$$?; wait $$other; o=$$?; \
	  cat $$log; rm -f $$log; test $$py -eq 0 && test $$o -eq 0

# the JS package in web/ (Node, and the demo page in headless Chromium) against the Python runtime of this checkout
# Its Python children (reference answers, HF conversions in torch) run one OpenMP thread, as tests/conftest.py
# gives pytest's: beside the other stream a second thread only contends for the two cores (a conversion's test
# took 237 s with two, 111 s with one)
WEB_ENV = OMP_NUM_THREADS=1 SEQ2ONNX_PYTHON=$(abspath $(DEV_VENV))/bin/python
WEB_RUN = cd web && $(WEB_ENV) npm test
WEB_TEST = cd web && npm ci && $(WEB_ENV) npm test
.PHONY: test-web test-suites lint
# pyflakes' and pycodestyle's bug-finding rules ([tool.ruff.lint] in pyproject.toml), then mypy on the runtime
# ([tool.mypy]), before any test runs. mypy's cache lives in the venv: a first run takes about a minute, later ones
# seconds, and `make clean` drops it with the venv
lint:
	$(DEV_VENV)/bin/ruff check .
	$(DEV_VENV)/bin/mypy --cache-dir $(DEV_VENV)/.mypy_cache runtime/

test-web: chromium install-dev
	$(WEB_TEST)

# web/test/browser.test.js runs the demo page in Debian's Chromium at $SEQ2ONNX_CHROMIUM (its default is the path
# below) and fails without one. Checked before anything installs; as root (CI) apt-get installs it, otherwise one line
# says how. SEQ2ONNX_SKIP_BROWSER=1 skips that test, and this check, by choice.
CHROMIUM = $${SEQ2ONNX_CHROMIUM:-/usr/bin/chromium}
chromium:
	@if [ "$${SEQ2ONNX_SKIP_BROWSER:-}" != 1 ] && [ ! -x "$(CHROMIUM)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || true; \
	  fi; \
	  if [ ! -x "$(CHROMIUM)" ]; then \
	    echo "make: web/'s browser test needs Chromium at $(CHROMIUM): install it (Debian: sudo apt-get install -y chromium), set SEQ2ONNX_CHROMIUM to a Chromium executable, or SEQ2ONNX_SKIP_BROWSER=1 to skip that test" >&2; \
	    exit 2; \
	  fi; \
	fi

# the versions a venv resolved (VENV=.venv by default)
versions:
	@$(PYTHON) scripts/versions.py $(or $(VENV),$(DEV_VENV))

# newest versions the ranges allow, no lock, in a venv made anew; torch stays at the lock's version, in the build
# INSTALL_TORCH chose (an eager upgrade would fetch PyPI's newest: a CUDA build on Linux x86_64)
test-latest:
	rm -rf .venv-latest && $(PYTHON) -m venv .venv-latest
	$(call INSTALL_TORCH,.venv-latest)
	grep -E '^torch==' $(LOCK) > .venv-latest/torch.txt
	.venv-latest/bin/pip install $(PIP_FLAGS) -c .venv-latest/torch.txt --upgrade --upgrade-strategy eager ".[train,convert,test]"
	@$(PYTHON) scripts/versions.py .venv-latest
	$(call PYTEST,.venv-latest)

# the lowest versions pyproject.toml allows for the runtime's dependencies (pip fits the rest to them)
test-oldest:
	rm -rf .venv-oldest && $(PYTHON) -m venv .venv-oldest
	$(PYTHON) scripts/lowest_versions.py > .venv-oldest/lowest.txt
	$(call INSTALL_TORCH,.venv-oldest)
	.venv-oldest/bin/pip install $(PIP_FLAGS) -c .venv-oldest/lowest.txt ".[train,convert,test]"
	@$(PYTHON) scripts/versions.py .venv-oldest
	$(call PYTEST,.venv-oldest)

lock:
	TORCH_INDEX_URL=$(TORCH_INDEX_URL) bash scripts/lock.sh $(PYTHON) $(LOCK)

demo: install-runtime
	@bash scripts/demo.sh $(RT_VENV)

# Reproduce models/numbers-en-de from nothing (data, training, export, evaluation): tens of minutes.
numbers-model: install-dev
	@bash scripts/make_numbers_model.sh $(DEV_VENV)

bench: install-dev
	$(DEV_VENV)/bin/pip install $(PIP_FLAGS) -c $(LOCK) ".[bench]"
	$(DEV_VENV)/bin/python bench/run.py

clean:
	rm -rf $(DEV_VENV) $(RT_VENV) .venv-latest .venv-oldest build *.egg-info .pytest_cache .mypy_cache
