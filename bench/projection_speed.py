"""Projection speed: plan and project a sweep of about 1,000 cells (the study's layouts at 32 to 8,192 GPUs).

    python bench/projection_speed.py [--cells 1000]

Prints the seconds to calibrate (once, from the committed H200 measurements), to plan the cells and to project them;
the target is under 10 s for 1,000 cells on 2 cores, calibration excluded (the workflow fits it once and
saves it). A benchmark, not a test: the machine is shared, so it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.plan.cell import Cell  # noqa: E402
from calorimeter.plan.plan import check_cell  # noqa: E402
from calorimeter.projection.calibration import calibrate_all  # noqa: E402
from calorimeter.projection.catalogue import catalogue  # noqa: E402
from calorimeter.projection.sweep import project_cells  # noqa: E402

LAYOUTS = {
    "gpt3-175b": [(8, 4, 1), (4, 8, 1), (8, 8, 1), (2, 16, 1), (8, 16, 1)],
    "llama3-70b": [(8, 2, 1), (4, 4, 1), (8, 4, 1), (2, 8, 1), (8, 1, 1)],
    "mixtral-8x22b": [(1, 4, 8), (2, 2, 8), (4, 1, 8), (2, 4, 8)],
    "mixtral-8x7b": [(1, 1, 8), (2, 1, 4), (1, 4, 8), (2, 2, 8)],
}


def cells(n: int) -> list[Cell]:
    """Up to n cells: layouts x nodes (4..1024) x recompute x overlap x micro-batch."""
    out = []
    for model, layouts in LAYOUTS.items():
        for (tp, pp, ep), nodes, rc, ov, mb in itertools.product(layouts, (4, 16, 64, 128, 256, 512, 1024),
                                                                 ("none", "full"), (False, True), (1, 2)):
            gb = 128 if nodes == 4 else 4096
            out.append(Cell(sweep="bench", model=model, hardware="h200", nodes=nodes, gpus_per_node=8, tp=tp, pp=pp,
                            ep=ep, sequence_parallel=tp > 1, recompute=rc, overlap=ov, micro_batch=mb,
                            global_batch=gb, seq_len={"gpt3-175b": 2048, "llama3-70b": 8192}.get(model, 4096),
                            precision="bf16"))
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=1000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    cals = calibrate_all([str(ROOT / p) for p in catalogue(ROOT).calibration_sweeps])
    t1 = time.perf_counter()
    planned = [pc.cell for pc in map(check_cell, cells(args.cells)) if pc.status == "planned"]
    t2 = time.perf_counter()
    df = project_cells(planned, cals)
    t3 = time.perf_counter()
    print(f"calibration (once): {t1 - t0:.2f} s, {len(cals)} calibrations (GPU type x engine fingerprint) on "
          f"{sum(len(c.cells) for c in cals.values())} measured cells")
    print(f"plan: {t2 - t1:.2f} s for {args.cells} cells ({len(planned)} planned)")
    print(f"projection: {t3 - t2:.2f} s for {len(df)} cells ({(t3 - t2) / max(len(df), 1) * 1e3:.1f} ms per cell)")
    print(f"plan + projection: {t3 - t1:.2f} s (target < 10 s for 1,000 cells on 2 cores)")
    print(f"largest: {df['world_size'].max()} GPUs; MFU (full attention) {df['mfu_full'].min():.1%} .. "
          f"{df['mfu_full'].max():.1%}")


if __name__ == "__main__":
    main()
