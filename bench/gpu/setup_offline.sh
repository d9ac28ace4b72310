#!/usr/bin/env bash
# Source this on an offline GPU node: installs the wheels in .whl/ (built here with
#   python -m calorimeter.launch.wheelhouse --python-version 3.12 --dest .whl --skip <packages the node has>
# plus the GPU extra, which the CPU environment does not install:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl liger-kernel==0.8.5)
# into /tmp/site (once per node: a later run on the same node reuses it while /tmp lasts) and puts the project's source
# first on PYTHONPATH. The node's own CUDA torch is used.
set -e
# .whlxz/whl.tar.xz (bench/gpu/pack_wheels.sh), and with --split also .whlxzA/whl.tar.xz, sent instead of .whl/:
# unpacked here first (both halves fit within 64 MiB while bench/gpu/lighten.sh keeps the measurements off the disk)
if [ ! -d .whl ]; then
  for archive in .whlxzA/whl.tar.xz .whlxz/whl.tar.xz; do
    if [ -f "$archive" ]; then tar xJf "$archive"; fi
  done
fi
STAMP=/tmp/site/.installed-$(ls .whl | md5sum | cut -c1-12)
if [ -z "${SKIP_WHEELS:-}" ] && [ ! -f "$STAMP" ]; then   # SKIP_WHEELS=1: a CPU dry run here
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  touch "$STAMP"
fi
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c "import torch, deepspeed, submitit, snakemake; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count(), 'deepspeed', deepspeed.__version__)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version,power.limit --format=csv
# Without Liger's kernels the engine's `fused: auto` falls back to torch.compile: another engine build, which the
# projection keeps apart and which is slower. A measurement set must not change engine build silently: stop here
# unless ALLOW_NO_LIGER=1 says the fallback is wanted.
if ! python3 -c "import liger_kernel.ops" 2>/dev/null; then
  echo "liger_kernel: missing (fused: auto would fall back to torch.compile); add its wheel to .whl (see the top of this file) or set ALLOW_NO_LIGER=1" >&2
  [ -n "${ALLOW_NO_LIGER:-}" ] || exit 3   # sourced: stops the calling script too
fi
set +e
