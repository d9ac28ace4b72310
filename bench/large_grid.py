"""How fast a large grid is planned and dry-run (Snakemake builds the DAG of every cell).

    python bench/large_grid.py                      # 200,000 cells: plan, then `snakemake -n --quiet`
    python bench/large_grid.py --cells 20000 --profile /tmp/dry.prof    # cProfile of the dry run
    python bench/large_grid.py --cells 2000 --root /path/to/other/checkout     # the same on another checkout

Prints the seconds of each phase. The grid is tiny-gpt on CPU over micro-batch x sequence length x global batch lists
sized to the requested count (nothing is trained). Compare runs side by side, one right after the other: the machine
is shared and noisy.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def sweep_file(cells: int, folder: Path) -> Path:
    """A sweep of ``cells`` cells (rounded up): 4 micro-batches x 50 sequence lengths x global batches."""
    mbs, seqs = [1, 2, 4, 8], list(range(16, 16 + 50 * 16, 16))
    gbs = [8 * k for k in range(1, math.ceil(cells / (len(mbs) * len(seqs))) + 1)]
    cfg = {"sweep": "large", "hardware": "cpu", "results_dir": str(folder / "results"), "memory_check": False,
           "defaults": {"model": "tiny-gpt", "gpus_per_node": 1, "warmup_steps": 0, "measured_steps": 1},
           "grid": [{"micro_batch": mbs, "seq_len": seqs, "global_batch": gbs}]}
    path = folder / "large.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200_000)
    ap.add_argument("--profile", help="write a cProfile of the dry run here")
    ap.add_argument("--no-dry-run", action="store_true")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout to time (default: this one)")
    args = ap.parse_args()
    root = args.root.resolve()
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    sys.path.insert(0, str(root / "src"))
    from calorimeter.plan import plan_file

    with tempfile.TemporaryDirectory() as tmp:
        path = sweep_file(args.cells, Path(tmp))
        t0 = time.perf_counter()
        plan = plan_file(path)
        t_plan = time.perf_counter() - t0
        print(f"cells: {len(plan.cells):,}  plan: {t_plan:.1f} s")
        if args.no_dry_run:
            return 0
        prof = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        cmd = [sys.executable, *prof, "-m", "snakemake", "-n", "--quiet", "rules", "--nolock", "--configfile",
               str(path)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        t_dry = time.perf_counter() - t0
        print(f"dry run: {t_dry:.1f} s (exit {r.returncode})")
        if r.returncode:
            print(r.stdout[-2000:], r.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
