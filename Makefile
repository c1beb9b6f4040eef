# chorus-flow: set-up, the embedded default run, and the tests.
#   make run   install into .venv and run the whole pipeline on the embedded default
#   make test  install into .venv, start the local Slurm cluster (as root), run the tests
PYTHON ?= python3
VENV ?= .venv
CORES ?= 2
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run report test slurm clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: it takes the CPU build on disk instead of a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# deepspeed ships as an sdist that must see torch while it builds
	$(BIN)/pip install -q --no-build-isolation 'deepspeed==0.19.8'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report results/report.html

test: setup
	CHORUS_REQUIRE_SLURM=$${CHORUS_REQUIRE_SLURM:-$$( [ "$$(id -u)" = 0 ] && echo 1 || echo 0 )} \
	  bash .ci/slurm/start_cluster.sh --if-root
	$(BIN)/python -m pytest -q -ra

clean:
	rm -rf results .snakemake .cache
