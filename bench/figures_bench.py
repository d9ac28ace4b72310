"""Benchmark: render every figure of the report from a synthetic 200-cell sweep, on 2 cores.

    python bench/figures_bench.py [--cells 200] [--cores 2] [--out /tmp/figures-bench]

Builds the tables (runs, gpus, steps, kernels, timeseries) of a synthetic sweep made of the study's sweeps' cells
(H200 optimization, micro-batch, parallelism, H100 optimization: first ``--cells`` of them, 32-64 GPUs each), pins
the process to ``--cores`` CPUs, renders the figures (PNG + PDF) in a pool of that many processes and prints the
time per figure and in all. Target: under a minute for 200 cells on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the synthetic tables are a test fixture, not part of the package

import pandas as pd  # noqa: E402
from synthetic import synthetic_tables  # noqa: E402

from calorimeter.figures import FIGURES, render  # noqa: E402
from calorimeter.plan.plan import plan_file  # noqa: E402

SWEEPS = ("h200-optimization", "h200-microbatch", "h200-parallelism", "h100-optimization")
_TABLES: dict[str, pd.DataFrame] = {}


def build(n_cells: int) -> dict[str, pd.DataFrame]:
    """Synthetic tables of the first ``n_cells`` cells of the study's sweeps (ids made unique per sweep)."""
    cells = []
    for s in SWEEPS:
        for pc in plan_file(ROOT / "config" / "sweeps" / f"{s}.yaml").cells:
            d = pc.to_dict()
            d["cell_id"] = f"{s}:{d['cell_id']}"
            cells.append(d)
    return synthetic_tables(cells[:n_cells], run_pruned=True)


def _init(tables: dict[str, pd.DataFrame]) -> None:
    _TABLES.update(tables)


def _render(args: tuple[str, str]) -> tuple[str, float, int, list[str]]:
    name, out = args
    t = time.perf_counter()
    res = render(name, _TABLES, Path(out) / f"{name}.png", Path(out) / f"{name}.pdf")
    return name, time.perf_counter() - t, res.n_points, res.missing


def main() -> int:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--out", default="/tmp/figures-bench")
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[: a.cores]
        os.sched_setaffinity(0, cpus)
    t0 = time.perf_counter()
    tables = build(a.cells)
    t_build = time.perf_counter() - t0
    rows = {k: len(v) for k, v in tables.items()}
    print(f"synthetic sweep: {len(tables['runs'])} cells, "
          f"{(tables['runs']['status'] == 'ok').sum()} ok; rows {rows}; built in {t_build:.1f} s")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # largest first, so that the pool's two workers finish together
    order = sorted(FIGURES, key=lambda n: n not in ("fig08_optimization", "fig13_microbatch", "throttle"))
    with ProcessPoolExecutor(a.cores, initializer=_init, initargs=(tables,)) as pool:
        results = list(pool.map(_render, [(n, a.out) for n in order]))
    wall = time.perf_counter() - t0
    print(f"{'figure':<22}{'s':>7}{'points':>8}  missing")
    for name, s, n, missing in sorted(results):
        print(f"{name:<22}{s:>7.2f}{n:>8}  {'; '.join(missing)[:70]}")
    print(f"rendered {len(results)} figures (PNG+PDF) on {a.cores} cores in {wall:.1f} s wall "
          f"(sum {sum(r[1] for r in results):.1f} s) -> {a.out}; target < 60 s: {'OK' if wall < 60 else 'MISSED'}")
    return 0 if wall < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
