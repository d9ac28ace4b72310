# Two commands on a fresh machine:  make run   (set up + run the default sweep)   make test   (set up + tests)
PYTHON ?= python3
comma := ,
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/config.yaml
# Offline installs: WHEELHOUSE=/path/to/wheels make setup   (see `make wheelhouse`)
WHEELHOUSE ?=
PIP_OFFLINE := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE),)
# The tested versions, hash-checked (requirements/lock.sh regenerates both locks with uv: `make lock`). LOCK= installs
# from the floors of pyproject.toml instead. LOCK=requirements/lock-gpu-py312.txt PYTHON=python3.12: the GPU
# environment of the committed records, CUDA torch included (what the container recipes install).
LOCK ?= requirements/lock-cpu-py311.txt
EXTRAS ?= test,hf,lora
# GPU machines keep their own CUDA torch: the venv then sees the system site-packages and torch is not pinned.
HAS_CUDA_TORCH := $(shell command -v nvidia-smi >/dev/null 2>&1 && $(PYTHON) -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 && echo yes)
# a lock that pins torch itself (the GPU lock) installs it; otherwise the CPU torch of pyproject's `cpu` extra
LOCK_HAS_TORCH := $(if $(LOCK),$(shell grep -q '^torch==' $(LOCK) 2>/dev/null && echo yes),)
CPU_TORCH := $(shell sed -n 's/^cpu = \["\(torch==[^"]*\)"\]/\1/p' pyproject.toml)
# A wheelhouse holds wheels built here (deepspeed publishes no wheel), whose hashes no lock can know: its versions only
LOCK_INSTALL := $(if $(WHEELHOUSE),-r $(VENV)/lock-versions.txt,--require-hashes -r $(LOCK))
# `make setup` says what it does, with the seconds since it started, and pip shows each package it takes
SETUP_T0 := $(shell date +%s)
step = @echo ">> [$$(( $$(date +%s) - $(SETUP_T0) )) s] $(1)"

.PHONY: setup run report test test-fast ruff lint dryrun clean-env wheelhouse lock

setup: $(BIN)/.installed

$(BIN)/.installed: pyproject.toml $(LOCK)
	$(call step,1/5 creating $(VENV) with $(PYTHON) ($(if $(HAS_CUDA_TORCH),the system's CUDA torch,$(if $(LOCK_HAS_TORCH),torch from $(LOCK),CPU $(CPU_TORCH)))))
	$(PYTHON) -m venv $(if $(HAS_CUDA_TORCH),--system-site-packages,) $(VENV)
	$(call step,2/5 pip)
	$(BIN)/python -m pip install -q $(PIP_OFFLINE) --upgrade pip
	$(call step,3/5 torch: $(if $(HAS_CUDA_TORCH)$(LOCK_HAS_TORCH),with the locked packages or the system's,$(CPU_TORCH) (~200 MB)))
	$(if $(HAS_CUDA_TORCH)$(LOCK_HAS_TORCH),,$(BIN)/python -m pip install --progress-bar off $(PIP_OFFLINE) $(CPU_TORCH))
	$(call step,4/5 the locked packages: $(if $(LOCK),$(LOCK) ($(shell grep -c '^[A-Za-z]' $(LOCK) 2>/dev/null) packages$(if $(WHEELHOUSE),,$(comma) hash-checked)),none (LOCK= : the floors of pyproject.toml)))
	$(if $(WHEELHOUSE),sed -E '/^ *--hash=/d; s/ \\$$//' $(LOCK) > $(VENV)/lock-versions.txt,)
	$(if $(LOCK),DS_BUILD_OPS=0 $(BIN)/python -m pip install --progress-bar off $(PIP_OFFLINE) --no-deps $(LOCK_INSTALL),)
	$(call step,5/5 calorimeter itself$(comma) editable$(comma) with the extras $(EXTRAS))
	DS_BUILD_OPS=0 $(BIN)/python -m pip install $(if $(LOCK),-q --no-deps,--progress-bar off) $(PIP_OFFLINE) -e ".[$(EXTRAS)]"
	$(if $(HAS_CUDA_TORCH),,$(BIN)/python -m pip check)
	$(call step,done: $(VENV) ($$(du -sh $(VENV) | cut -f1)))
	@touch $@

run: setup
	$(BIN)/snakemake --configfile $(CONFIG)
	$(MAKE) --no-print-directory report CONFIG=$(CONFIG)

report: setup
	$(BIN)/snakemake --configfile $(CONFIG) --report results/$$($(BIN)/python -c "import yaml,sys; print(yaml.safe_load(open('$(CONFIG)')).get('sweep','default'))")/report.html

dryrun: setup
	@for f in config/sweeps/*.yaml; do echo ">> $$f"; $(BIN)/snakemake -n --quiet rules --configfile $$f || exit 1; done

# Every test (unit, integration: DeepSpeed ranks and Snakemake runs, slurm: the local cluster), on TEST_WORKERS
# pytest-xdist workers, one test file per worker at a time (--dist loadfile), longest first (tests/conftest.py: the
# SLURM scenarios, one file mostly waiting on the cluster, start at once on one worker while the others take the
# CPU-bound files). TEST_WORKERS=0 runs all in this process. --durations prints the slowest tests, so that the suite's
# budget (15 minutes on 2 cores, the unit tests 90 s) shows per test; `pytest --write-file-seconds` refreshes the
# seconds per file that order the files (tests/file_seconds.json).
TEST_WORKERS ?= 3
test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

# The unit tests only (pytest markers in pyproject.toml): under 90 s on 2 cores.
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 -m "not integration and not slurm" --durations=15

# ruff, then the package layering (import-linter contracts in pyproject.toml; also tests/test_import_contracts.py)
ruff: setup
	$(BIN)/ruff check src tests workflow bench
	$(BIN)/lint-imports --no-logo

lint: ruff
	$(BIN)/snakemake --lint

# Wheels for an offline compute node: make wheelhouse PYVER=3.12 PLATFORM=manylinux2014_x86_64
PYVER ?= 3.12
PLATFORM ?= manylinux2014_x86_64
wheelhouse: setup
	$(BIN)/python -m calorimeter.launch.wheelhouse --python-version $(PYVER) --platform $(PLATFORM) --dest wheelhouse

# Regenerate the hashed locks (requirements/lock.sh: uv pip compile --generate-hashes, from PyPI)
lock: setup
	$(BIN)/python -m pip install -q $(PIP_OFFLINE) uv
	UV=$(BIN)/uv bash requirements/lock.sh

clean-env:
	rm -rf $(VENV)
