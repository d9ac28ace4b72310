# Two commands on a fresh machine:  make run   (set up + run the default sweep)   make test   (set up + tests)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/config.yaml
# Offline installs: WHEELHOUSE=/path/to/wheels make setup   (see `make wheelhouse`)
WHEELHOUSE ?=
PIP_OFFLINE := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE),)
# The tested versions (pip constraints; `make lock` regenerates it from the venv). LOCK= installs from the floors.
LOCK ?= requirements/constraints-py311.txt
PIP_LOCK := $(if $(LOCK),-c $(LOCK),)
# GPU machines keep their own CUDA torch: the venv then sees the system site-packages and torch is not pinned.
HAS_CUDA_TORCH := $(shell command -v nvidia-smi >/dev/null 2>&1 && $(PYTHON) -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 && echo yes)

.PHONY: setup run report test test-fast ruff lint dryrun clean-env wheelhouse lock

setup: $(BIN)/.installed

$(BIN)/.installed: pyproject.toml $(LOCK)
	@echo ">> creating $(VENV) ($(if $(HAS_CUDA_TORCH),system CUDA torch,CPU torch 2.13.0))"
	$(PYTHON) -m venv $(if $(HAS_CUDA_TORCH),--system-site-packages,) $(VENV)
	$(BIN)/python -m pip install -q $(PIP_OFFLINE) --upgrade pip
	$(if $(HAS_CUDA_TORCH),,$(BIN)/python -m pip install -q $(PIP_OFFLINE) torch==2.13.0)
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q $(PIP_OFFLINE) $(PIP_LOCK) -e ".[test,hf,lora]"
	@touch $@

run: setup
	$(BIN)/snakemake --configfile $(CONFIG)
	$(MAKE) --no-print-directory report CONFIG=$(CONFIG)

report: setup
	$(BIN)/snakemake --configfile $(CONFIG) --report results/$$($(BIN)/python -c "import yaml,sys; print(yaml.safe_load(open('$(CONFIG)')).get('sweep','default'))")/report.html

dryrun: setup
	@for f in config/sweeps/*.yaml; do echo ">> $$f"; $(BIN)/snakemake -n --quiet rules --configfile $$f || exit 1; done

# Every test (unit, integration: DeepSpeed ranks and Snakemake runs, slurm: the local cluster), on TEST_WORKERS
# pytest-xdist workers, one test file per worker at a time (--dist loadfile): the SLURM scenarios (one file, mostly
# waiting on the cluster) run in order on one of them while the others take the CPU-bound tests. (loadgroup's
# xdist_group marks are not applied with pytest 9.2 + xdist 3.8: checked.) TEST_WORKERS=0 runs all in this process.
TEST_WORKERS ?= 3
test: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The unit tests only (pytest markers in pyproject.toml): under 2 minutes on 2 cores.
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 -m "not integration and not slurm"

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

# Regenerate the constraints from the venv (after changing pyproject.toml and reinstalling with LOCK=)
lock: setup
	@{ sed -n '/^#/p' $(LOCK); $(BIN)/python -m pip freeze | grep -v -i -E '^-e|^#|^torch==|^nvidia-(cu|nccl|nvjitlink|nvtx|nvshmem|cusparse|cufft|curand|cusolver|cudnn|cublas|cuda)|^triton==|^snakemake-executor-plugin-slurm|^calorimeter' | sort -f; } > $(LOCK).new && mv $(LOCK).new $(LOCK)

clean-env:
	rm -rf $(VENV)
