"""How far a GPU's time-averaged SM clock may be off where its sampler left gaps (an estimate, not a correction).

    PYTHONPATH=src python bench/clock_gap_bias.py SWEEP_FOLDER      # CPU, ~10 s a set of 20 cells

Where sampled power misses part of a window (``power_coverage_frac`` < 0.9), ``power_avg_w`` comes from the energy
counter (calorimeter.analysis.window), but the SM clock has no counter: its mean is the trapezoid of the samples.
If the gaps fall on one load phase, the clock mean is off as the power trapezoid is. Per GPU: the slope of clock on
power within its samples over the window (prepared by calorimeter.analysis.window.GpuSamples), times (counter mean
power - sampled mean power), is the shift the clock mean would need to match the counter; per cell, the mean over
its GPUs. Prints one line per cell; never writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from calorimeter.analysis.window import GpuSamples


def main(folder: Path) -> None:
    g = pd.read_parquet(folder / "tables" / "gpus.parquet")
    runs = pd.read_parquet(folder / "tables" / "runs.parquet").set_index("cell_id")
    print("cell | machine | mean SM clock (MHz) | estimated shift to the counter's power (MHz) "
          "| power, samples / counter (W)")
    for cid in sorted(runs.index):
        t = pd.read_parquet(folder / "cells" / cid / "telemetry.parquet")
        node = t["node"] if "node" in t.columns else pd.Series(0, index=t.index)
        rows = []
        for _, gpu in g[g.cell_id == cid].iterrows():
            samples = GpuSamples(t[(node == gpu.get("node", 0)) & (t.gpu_index == gpu.gpu_index)])
            (tp, p), (tc, clock) = samples.series(gpu.power_source if gpu.power_source in t.columns
                                                  else "power_instant_w"), samples.series("sm_clock_mhz")
            inside = (tp >= gpu.begin_s) & (tp <= gpu.end_s)
            if inside.sum() < 10 or tc.size < 2 or not (gpu.energy_window_s > 0 and gpu.energy_counter_s > 0):
                continue
            slope = np.polyfit(p[inside], np.interp(tp[inside], tc, clock), 1)[0]
            sampled = gpu.energy_trapezoid_j / gpu.energy_window_s
            counter = gpu.energy_counter_j / gpu.energy_counter_s
            rows.append((gpu.sm_clock_avg_mhz, slope * (counter - sampled), sampled, counter))
        if rows:
            a = np.array(rows).mean(axis=0)
            print(f"{cid} | {str(runs.loc[cid, 'machine'])[:12]} | {a[0]:.1f} | {a[1]:+.1f} | {a[2]:.0f} / {a[3]:.0f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
