"""How long after training starts the GPUs of a cell become thermally steady, and whether they stay so
(docs/findings.md, preconditions; calorimeter.records.steadiness).

For every committed GPU cell that trained at least MIN_TRAIN_S seconds (warm-up and measured steps together), from its
own telemetry (``telemetry.parquet``: time_s, gpu_index, gpu_temp_c) and steps (``steps.parquet``), times counted from
the first warm-up step's start:

* **the drift rule over time**: every GRID_S seconds from FIT_S on, the largest |least-squares slope| over the cell's
  GPUs over the last FIT_S seconds, and whether a FIT_S-second measured window ending there would be thermally steady
  (:func:`calorimeter.records.steadiness.drift_c` below the sensor's 1 degC); per time bin (:data:`BINS_S`) the share
  of times it holds and the median slope;
* **first steady**: the first time the rule holds, and the first time at which it holds and holds at least 90% of the
  times from there on;
* **each GPU's rise**: the mean temperature of its last 60 s of training, and the time it first came within 1 degC of
  it (the sensor's resolution);
* **each GPU's step-to-step swing**: the standard deviation of its mean power per training step (rank 0's step
  boundaries; a pipeline's steps end together) over the steps that began SWING_AFTER_S or later: a GPU whose load
  is the same every step has a small one, whatever its power.

Usage: PYTHONPATH=src python bench/thermal_settle.py [results/reference] [--sets SUBSTRING ...] [--min-train-s S]
                                                    [--doc FILE]
prints one table of cells and one of the drift rule by time bin; ``--doc docs/findings.md`` also rewrites that file's
table (between ``<!-- BEGIN bench/thermal_settle.py ... -->`` and ``<!-- END bench/thermal_settle.py -->``: the
sets of :data:`DOC_SETS`, by time bin, with the step-to-step power swing per GPU). A few seconds per set on one core.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
from steady_criterion import cell_gpus, write_doc  # bench/steady_criterion.py, beside this script

from calorimeter.records.paths import CellPaths
from calorimeter.records.run_record import read_run_record
from calorimeter.records.steadiness import FIT_MIN_S, drift_c, is_steady, lsq_slope_c_per_min

#: the fit window (s): the shortest measured window the analysis counts (a longer window only allows a smaller slope)
FIT_S = FIT_MIN_S
#: the drift rule is evaluated every GRID_S seconds
GRID_S = 1.0
#: time bins (s from the start of training) of the second table
BINS_S = (30, 60, 90, 120, 180, 240, 300)
#: cells that trained at least this long are read (s)
MIN_TRAIN_S = 60.0
#: the final temperature of a GPU: its mean over the last this many seconds of training
FINAL_S = 60.0
#: the step-to-step power swing is read over the steps that began this long after the start or later (s)
SWING_AFTER_S = 60.0
#: the sets docs/findings.md shows
DOC_SETS = ("h200x2-thermal-soak-2026-11-28", "h200x4-findings-depth-2026-11-27g",
            "h200x4-findings-depth-steady-2026-11-28")


@dataclass
class Cell:
    name: str
    train_s: float  # first warm-up step's start to the last measured step's end
    times_s: np.ndarray  # evaluation times from the start of training
    max_slope: np.ndarray  # largest |FIT_S slope| over the GPUs at each time (degC/min)
    rise_s: list[float]  # per GPU: first time within 1 degC of its final temperature
    final_c: list[float]  # per GPU: mean temperature over the last FINAL_S seconds
    swing_w: list[float]  # per GPU: SD of the mean power per step, steps from SWING_AFTER_S on

    @cached_property
    def steady(self) -> np.ndarray:
        return np.array([is_steady(drift_c(s, FIT_S)) for s in self.max_slope])

    def first_steady_s(self) -> float:
        hit = np.flatnonzero(self.steady)
        return float(self.times_s[hit[0]]) if hit.size else float("nan")

    def settled_s(self, share: float = 0.9) -> float:
        """The first time at which the rule holds and holds at least ``share`` of the times from there on."""
        ok = self.steady
        rest = np.cumsum(ok[::-1].astype(float))[::-1] / np.arange(len(ok), 0, -1)
        hit = np.flatnonzero(ok & (rest >= share))
        return float(self.times_s[hit[0]]) if hit.size else float("nan")


def read_cell(folder: Path, min_train_s: float) -> Cell | None:
    paths = CellPaths(folder)
    rec = read_run_record(paths.run_json)
    if not rec.ok or not paths.telemetry.is_file() or not paths.steps.is_file():
        return None
    steps = pd.read_parquet(paths.steps)
    train = steps[steps["phase"].isin(["warmup", "measured"])]
    if train.empty:
        return None
    t0, t1 = float(train["t_begin_s"].min()), float(train["t_end_s"].max())
    if t1 - t0 < min_train_s:
        return None
    gpus = cell_gpus(paths, rec)
    if not gpus:
        return None
    grid = np.arange(t0 + FIT_S, t1 + 1e-9, GRID_S)
    series = [g.series("gpu_temp_c") for g in gpus]
    slopes = np.array([[abs(lsq_slope_c_per_min(t, v, e - FIT_S, e)) for e in grid] for t, v in series])
    r0 = train[train["rank"] == train["rank"].min()].sort_values("t_begin_s")
    edges = np.r_[r0["t_begin_s"].to_numpy(), r0["t_end_s"].to_numpy()[-1:]]
    late = np.flatnonzero(edges[:-1] >= t0 + SWING_AFTER_S)
    swing = []
    for g in gpus:
        t, w = (np.asarray(a, float) for a in g.series("power_instant_w"))
        step = np.searchsorted(edges, t, side="right") - 1
        means = [np.nanmean(w[step == i]) for i in late if np.any(step == i)]
        swing.append(float(np.std(means, ddof=1)) if len(means) >= 3 else float("nan"))
    rise, final = [], []
    for t, v in series:
        t, v = np.asarray(t, float), np.asarray(v, float)
        inside = (t >= t0) & (t <= t1)
        end = float(np.nanmean(v[inside & (t >= t1 - FINAL_S)]))
        near = np.flatnonzero(inside & (np.abs(v - end) <= 1.0))
        final.append(end)
        rise.append(float(t[near[0]] - t0) if near.size else float("nan"))
    return Cell(folder.name, t1 - t0, grid - t0, np.nanmax(slopes, axis=0), rise, final, swing)


def cells_under(root: Path, sets: list[str], min_train_s: float) -> list[tuple[str, Cell]]:
    out = []
    for run_json in sorted(root.rglob("cells/*/run.json")):
        name = run_json.parent.parent.parent.relative_to(root).as_posix()
        if sets and not any(s in name for s in sets):
            continue
        cell = read_cell(run_json.parent, min_train_s)
        if cell is not None:
            out.append((name, cell))
    return out


def _s(x: float) -> str:
    return "-" if x != x else f"{x:.0f}"


def configuration(cell_id: str) -> str:
    """A cell's model, layout and recomputation, as its id names them (its repetitions alike)."""
    m = re.match(r"(?P<model>.+?)_[a-z0-9]+-\d+x\d+_(?P<layout>tp\d+-pp\d+-dp\d+\S*?)_z\d+_rc-(?P<rc>[a-z]+)_", cell_id)
    return (f"{m['model']}, {m['layout']}, recompute {m['rc']}" if m else re.sub(r"_r\d+$", "", cell_id))


def bin_table(cells: list[tuple[str, Cell]], swing: bool = False) -> str:
    """One row per set and configuration: the drift rule's share and median slope per time bin (and, with ``swing``,
    the median over the row's cells of each GPU's step-to-step power SD)."""
    edges = list(BINS_S) + [float("inf")]
    heads = [f"{a}-{b:g} s" if b != float("inf") else f">= {a} s" for a, b in pairwise(edges)]
    extra = [f"step-to-step SD of power from {SWING_AFTER_S:g} s, per GPU, median (W)"] if swing else []
    lines = ["| set | configuration | cells | " + " | ".join(heads + extra) + " |",
             "|---|---|---|" + "---|" * (len(heads) + len(extra))]
    for name, conf in dict.fromkeys((n, configuration(c.name)) for n, c in cells):
        group = [c for n, c in cells if n == name and configuration(c.name) == conf]
        row = []
        for a, b in pairwise(edges):
            ok = np.concatenate([c.steady[(c.times_s >= a) & (c.times_s < b)] for c in group])
            sl = np.concatenate([c.max_slope[(c.times_s >= a) & (c.times_s < b)] for c in group])
            row.append(f"{100 * ok.mean():.0f}% ({np.nanmedian(sl):.1f})" if ok.size else "-")
        if swing:
            per_gpu = np.array([c.swing_w for c in group if len(c.swing_w) == len(group[0].swing_w)], dtype=float)
            row.append(" / ".join(_s(w) for w in np.nanmedian(per_gpu, axis=0)) if np.isfinite(per_gpu).any() else "-")
        lines.append(f"| `{name}` | {conf} | {len(group)} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path("results/reference"))
    ap.add_argument("--sets", nargs="*", default=[], help="only sweeps whose path contains one of these")
    ap.add_argument("--min-train-s", type=float, default=MIN_TRAIN_S)
    ap.add_argument("--doc", type=Path, help="also rewrite this document's table (docs/findings.md)")
    args = ap.parse_args()
    if args.doc and args.sets:
        ap.error("--doc shows the sets of DOC_SETS: leave out --sets")
    cells = cells_under(args.root, list(DOC_SETS) if args.doc else args.sets, args.min_train_s)
    if not cells:
        sys.exit(f"no GPU cell under {args.root} trained {args.min_train_s:g} s or longer")
    print(f"| set | cell | trained (s) | {FIT_S:g} s drift rule first holds (s) | holds >= 90% of the rest from (s) | "
          "per GPU: within 1 degC of its final temperature after (s) | final temperature (degC) | "
          f"step-to-step SD of power from {SWING_AFTER_S:g} s (W) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, c in cells:
        print(f"| `{name}` | `{c.name}` | {c.train_s:.0f} | {_s(c.first_steady_s())} | {_s(c.settled_s())} | "
              f"{' / '.join(_s(r) for r in c.rise_s)} | {' / '.join(f'{f:.1f}' for f in c.final_c)} | "
              f"{' / '.join(_s(w) for w in c.swing_w)} |")
    print()
    print(bin_table(cells))
    print(f"(each bin: share of times at which a {FIT_S:g} s measured window ending there would be thermally steady "
          f"on every GPU, and the median of the largest {FIT_S:g} s |slope| in degC/min)")
    if args.doc:
        write_doc(args.doc, bin_table(cells, swing=True), tag="bench/thermal_settle.py")


if __name__ == "__main__":
    main()
