"""Projection accuracy on held-out measured cells: the issue's targets, from the committed H200 measurements.

    python bench/projection_validation.py

Folds: predict the 8-GPU H200 cells from the 2- and 4-GPU sets, and the reverse (nothing of the held-out cells
enters the calibration). Prints, per fold, the median and largest absolute error of iteration time, energy per token
and average power over the GPU-bound cells (and over all), every cell beyond 25% with its notes, and whether the
targets hold: median |error| of iteration time <= 10%, of energy per token <= 10%, no cell beyond 25% without an
explanation. Prints; never asserts.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.projection.sweep import DEFAULT_FOLDS  # noqa: E402
from calorimeter.projection.validation import Fold, summarize, validate  # noqa: E402


def main() -> None:
    folds = [Fold(f["name"], tuple(str(ROOT / p) for p in f["train"]), tuple(str(ROOT / p) for p in f["test"]))
             for f in DEFAULT_FOLDS]
    table = validate(folds)
    for name, s in summarize(table).items():
        print(f"== {name}: {s['cells']} held-out cells ({s['gpu_bound_cells']} GPU-bound)")
        for m in ("iteration_time_s", "energy_per_token_j", "power_avg_w", "mfu_full"):
            v = s[m]
            print(f"  {m:20s} median |err| {v['median_abs_gpu_bound']:6.1%} (all {v['median_abs']:6.1%})   "
                  f"max {v['max_abs_gpu_bound']:6.1%} (all {v['max_abs']:6.1%})")
        for w in s["over_25pct"]:
            print(f"  > 25%: {w['cell_id']}: time {w['iteration_time']:+.1%}, energy/token "
                  f"{w['energy_per_token']:+.1%}; {w['notes'] or 'NO EXPLANATION'}")
        print(f"  targets met: {s['targets_met']}")
    cols = ["fold", "cell_id", "iteration_time_s_rel_error", "energy_per_token_j_rel_error", "power_avg_w_rel_error"]
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:+.3f}"))


if __name__ == "__main__":
    main()
