#!/usr/bin/env bash
# Regenerate the hashed locks from pyproject.toml with uv (`uv pip compile --generate-hashes`; PyPI):
#   requirements/lock-cpu-py311.txt  Python 3.11, x86-64 Linux: what `make setup` installs (--require-hashes), less
#                                    torch and its CUDA wheels (the Makefile installs the CPU torch of the `cpu` extra)
#   requirements/lock-gpu-py312.txt  Python 3.12, x86-64 Linux: the GPU environment of the committed records
#                                    (requirements/gpu-py312.in), torch 2.11.0 with its CUDA 13 wheels included;
#                                    what the container recipes (Dockerfile, calorimeter.def) install
# An existing lock's versions are kept where they still satisfy pyproject.toml (uv prefers them); UPGRADE=1 takes
# the newest. The extras: those `make setup` installs (CPU), and for the GPU image also gpu (Liger) and peers.
#   bash requirements/lock.sh            (make lock)
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
COMMON=(--generate-hashes --python-platform x86_64-manylinux_2_28 --custom-compile-command "bash requirements/lock.sh")
[ -n "${UPGRADE:-}" ] && COMMON+=(--upgrade)
CPU_EXTRAS=(--extra cpu --extra test --extra hf --extra lora)
t0=$(date +%s)
# torch and the CUDA runtime wheels it pulls on Linux: not in the CPU lock (named from a first resolution)
skip=()
for name in $("$UV" pip compile -q pyproject.toml "${CPU_EXTRAS[@]}" --python-version 3.11 \
                --python-platform x86_64-manylinux_2_28 --no-header --no-annotate \
              | sed -n -E 's/^(torch|triton|cuda-[a-z-]+|nvidia-[a-z0-9-]+)==.*/\1/p' | grep -v '^nvidia-ml-py$'); do
  skip+=(--no-emit-package "$name")
done
"$UV" pip compile -q pyproject.toml "${CPU_EXTRAS[@]}" --python-version 3.11 "${COMMON[@]}" "${skip[@]}" \
  -o requirements/lock-cpu-py311.txt
echo "requirements/lock-cpu-py311.txt: $(grep -c '^[A-Za-z]' requirements/lock-cpu-py311.txt) packages ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
"$UV" pip compile -q pyproject.toml --extra gpu --extra test --extra hf --extra lora --extra peers \
  -c requirements/gpu-py312.in --python-version 3.12 "${COMMON[@]}" -o requirements/lock-gpu-py312.txt
echo "requirements/lock-gpu-py312.txt: $(grep -c '^[A-Za-z]' requirements/lock-gpu-py312.txt) packages ($(( $(date +%s) - t0 )) s)"
