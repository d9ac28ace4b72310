#!/usr/bin/env bash
# Snakemake runs this inside the new conda environment (`snakemake --sdm conda`), from the directory snakemake runs
# in: the calorimeter checkout. It installs the package and its dependencies at the tested versions, hash-checked
# (requirements/lock-cpu-py311.txt, the lock `make setup` uses). torch: the CPU build of the pin; on GPU nodes
# set CALORIMETER_TORCH_SPEC to your site's CUDA build (e.g. "torch==2.11.0" with PIP_EXTRA_INDEX_URL set), or to
# "" to keep a torch that the environment already has.
set -euo pipefail
if [ ! -f pyproject.toml ] || [ ! -d src/calorimeter ]; then
  echo "$0: run snakemake from the calorimeter checkout: this script installs the package from the working directory" \
       "($PWD has no pyproject.toml and src/calorimeter)" >&2
  exit 1
fi
LOCK=requirements/lock-cpu-py311.txt
TORCH_SPEC=${CALORIMETER_TORCH_SPEC-torch==2.13.0}
if [ -n "$TORCH_SPEC" ]; then
  python -m pip install --extra-index-url https://download.pytorch.org/whl/cpu "$TORCH_SPEC"
fi
DS_BUILD_OPS=0 python -m pip install --require-hashes --no-deps -r "$LOCK"
python -m pip install --no-deps -e ".[hf,lora]"
