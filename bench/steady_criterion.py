"""How often each definition of a thermally steady window holds on the committed records, and whether the runtime flag
selects steadier windows (docs/findings.md, preconditions; calorimeter.records.steadiness).

For every committed cell measured with ``warmup: steady`` on GPUs, from its own telemetry (``telemetry.parquet``:
time_s, gpu_index, gpu_temp_c) and steps (``steps.parquet``: phase, t_begin_s, t_end_s):

* **over the plateau** (from PLATEAU_AFTER_S after the warm-up's first step began to the end of the measured window,
  every GRID_S; a fit window of W seconds is evaluated from PLATEAU_AFTER_S + W on, so that it lies wholly on the
  plateau): the share of time at which every GPU's least-squares slope over the last 15 s is at most 1 °C/min (the
  rule the sets were measured with), the same over 30 s at most 1 and at most 2 °C/min, the median over that time
  of the largest |slope| over the GPUs, and the share of time the drift rule holds (the largest 30 s |slope| x the
  cell's measured duration, at least 30 s, below 1 °C: :func:`calorimeter.records.steadiness.drift_c`);
* **the drift rule replayed on the warm-up** (its runtime side, :func:`calorimeter.train.steady.steady_enough` with
  the cell's measured settings and a 30 s fit): after which warm-up step it would have ended the warm-up, in seconds
  from the warm-up's start, or not within the recorded warm-up;
* **on the measured window** (the analysis, ``GpuSamples.temperature_drift``): the largest |slope| over the GPUs of the
  fit over the measured window extended back to 30 s, split by what the runtime flag said (``steady`` or ``cap``),
  and how many cells are thermally steady by the drift.

Usage: PYTHONPATH=src python bench/steady_criterion.py [results/reference] [--sets SUBSTRING ...] [--doc FILE]
prints one row per set; ``--doc docs/findings.md`` also rewrites that file's table (between
``<!-- BEGIN bench/steady_criterion.py ... -->`` and ``<!-- END bench/steady_criterion.py -->``: the sets of
:data:`DOC_SETS` and all sets, fewer columns). Takes about ten seconds for every committed set on one core.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calorimeter.analysis.cell import cell_gpu_map, gpu_samples, normalize_telemetry, rank_table, sampler_periods
from calorimeter.analysis.window import GpuSamples
from calorimeter.plan.cell import Cell as PlannedCell
from calorimeter.records.paths import CellPaths
from calorimeter.records.run_record import RunRecord, read_run_record
from calorimeter.records.steadiness import drift_c, is_steady, lsq_slope_c_per_min
from calorimeter.train.steady import steady_enough

#: the plateau starts this long after the warm-up began (the H200 dies reach 90% of their rise within 5-22 s)
PLATEAU_AFTER_S = 20.0
#: the plateau is evaluated every GRID_S seconds
GRID_S = 0.5
#: the fit windows compared (s)
WINDOWS_S = (15.0, 30.0)
#: the fit window of the drift rule replayed on the warm-up (the new default ``steady_window_s``)
REPLAY_WINDOW_S = 30.0
#: the sets docs/findings.md shows (besides all sets together)
DOC_SETS = ("h200x4-findings-depth-2026-11-27g/h200x4-findings-depth",
            "findings-steady-2026-11-26/h200x2-findings-steady", "findings-steady-2026-11-25/h100x1-findings-steady")


@dataclass
class Cell:
    """What one cell's records say (see the module docstring)."""

    flag: str  # the runtime flag: steady or cap
    max_slope: dict[float, np.ndarray]  # fit window -> the largest |slope| over GPUs at each plateau time
    measured_s: float
    window_slope: float  # the largest |slope| over GPUs of the measured window's fit (°C/min)
    steady: bool  # thermally steady by the drift
    replay_s: float  # seconds of warm-up the drift rule would have taken (NaN: not within the recorded warm-up)
    warmup_s: float  # seconds the recorded warm-up took


@dataclass
class Sweep:
    name: str
    cells: list[Cell] = field(default_factory=list)


def cell_gpus(paths: CellPaths, rec: RunRecord) -> list[GpuSamples]:
    """The samples of the cell's GPUs, in the order of its ranks' GPU map (as the tables read them)."""
    ranks = rank_table(rec)
    tele = normalize_telemetry(pd.read_parquet(paths.telemetry), ranks)
    gpu_map, _ = cell_gpu_map(ranks, tele)
    meta = json.loads(paths.telemetry_json.read_text()) if paths.telemetry_json.is_file() else None
    samples = gpu_samples(tele, sampler_periods(meta))
    return [samples[(int(g.node), int(g.gpu_index))] for g in gpu_map.itertuples(index=False)]


def read_cell(folder: Path) -> Cell | None:
    """The cell's plateau slopes and measured-window drift; None when it was not a steady warm-up on GPUs."""
    paths = CellPaths(folder)
    rec = read_run_record(paths.run_json)
    if not rec.ok or (rec.warmup or {}).get("mode_used") != "steady" or not paths.telemetry.is_file():
        return None
    steps = pd.read_parquet(paths.steps)
    gpus = cell_gpus(paths, rec)
    warm = steps[steps["phase"] == "warmup"]
    meas = steps[steps["phase"] == "measured"]
    if warm.empty or meas.empty or not gpus:
        return None
    begin, end = float(meas["t_begin_s"].min()), float(meas["t_end_s"].max())
    max_slope = {}
    for w in WINDOWS_S:
        grid = np.arange(float(warm["t_begin_s"].min()) + PLATEAU_AFTER_S + w, end, GRID_S)
        per_gpu = [[abs(lsq_slope_c_per_min(*g.series("gpu_temp_c"), t - w, t)) for t in grid] for g in gpus]
        max_slope[w] = np.max(np.asarray(per_gpu).reshape(len(gpus), -1), axis=0)
    fits = [g.temperature_drift(begin, end) for g in gpus]
    reason = str((rec.warmup or {}).get("reason", ""))
    return Cell("steady" if reason == "steady" else "cap", max_slope, end - begin,
                max(abs(s) for s, _ in fits), all(is_steady(d) for _, d in fits), replay(rec.cell, warm, gpus),
                begin - float(warm["t_begin_s"].min()))


def replay(cell: dict, warm: pd.DataFrame, gpus: list) -> float:
    """Seconds from the warm-up's start to the end of the first warm-up step (at least ``warmup_steps``) after which
    the drift rule holds on every GPU, with the cell's measured settings, a 30 s fit and no slope cap."""
    planned = PlannedCell.from_dict({**cell, "steady_window_s": REPLAY_WINDOW_S, "steady_slope_c_per_min": None})
    t0 = float(warm["t_begin_s"].min())
    by_step = warm.groupby("step").agg(begin=("t_begin_s", "min"), end=("t_end_s", "max")).sort_values("end")
    for n, s in enumerate(by_step.itertuples(), start=1):
        slope = max(abs(lsq_slope_c_per_min(*g.series("gpu_temp_c"), s.end - REPLAY_WINDOW_S, s.end)) for g in gpus)
        if n >= planned.warmup_steps and steady_enough(planned, slope, s.end - s.begin)[0]:
            return s.end - t0
    return float("nan")


def shares(cells: list[Cell]) -> dict[str, float]:
    """The plateau shares (pooled over the cells' plateau times) and medians."""
    s15 = np.concatenate([c.max_slope[15.0] for c in cells])
    s30 = np.concatenate([c.max_slope[30.0] for c in cells])
    drift = np.concatenate([drift_c(c.max_slope[30.0], c.measured_s) for c in cells])
    s15, drift, s30 = s15[~np.isnan(s15)], drift[~np.isnan(s30)], s30[~np.isnan(s30)]
    nan = float("nan")
    return {"15 s <= 1": float(np.mean(s15 <= 1.0)) if s15.size else nan,
            "median 15 s": float(np.median(s15)) if s15.size else nan,
            "30 s <= 1": float(np.mean(s30 <= 1.0)) if s30.size else nan,
            "30 s <= 2": float(np.mean(s30 <= 2.0)) if s30.size else nan,
            "median 30 s": float(np.median(s30)) if s30.size else nan,
            "drift < 1 degC": float(np.mean(drift < 1.0)) if drift.size else nan,
            "seconds 15": s15.size * GRID_S, "seconds 30": s30.size * GRID_S}


def _range(x: list[float]) -> str:
    return f"{np.median(x):.1f} ({min(x):.1f}-{max(x):.1f})" if x else "-"


def row(name: str, cells: list[Cell]) -> str:
    sh = shares(cells)
    by = {f: [c.window_slope for c in cells if c.flag == f] for f in ("steady", "cap")}
    replayed = [c.replay_s for c in cells if c.replay_s == c.replay_s]
    return (f"| {name} | {len(cells)} | {sh['seconds 15']:.0f} s: {100 * sh['15 s <= 1']:.0f}% | "
            f"{sh['median 15 s']:.1f} | {sh['seconds 30']:.0f} s: {100 * sh['30 s <= 1']:.0f}% | "
            f"{100 * sh['30 s <= 2']:.0f}% | {sh['median 30 s']:.1f} | "
            f"{100 * sh['drift < 1 degC']:.0f}% | {len(by['steady'])}: {_range(by['steady'])} | "
            f"{len(by['cap'])}: {_range(by['cap'])} | {sum(c.steady for c in cells)} of {len(cells)} | "
            f"{_range([c.warmup_s for c in cells])} | {len(replayed)} of {len(cells)}: {_range(replayed)} |")


def doc_row(name: str, cells: list[Cell]) -> str:
    """The row of docs/findings.md's table: fewer columns than :func:`row`."""
    sh = shares(cells)
    by = {f: [c.window_slope for c in cells if c.flag == f] for f in ("steady", "cap")}
    return (f"| {name} | {len(cells)} | {100 * sh['15 s <= 1']:.0f}% ({sh['median 15 s']:.1f}) | "
            f"{100 * sh['30 s <= 1']:.0f}% / {100 * sh['30 s <= 2']:.0f}% ({sh['median 30 s']:.1f}) | "
            f"{100 * sh['drift < 1 degC']:.0f}% | {_range(by['steady']) if by['steady'] else 'none'} | "
            f"{_range(by['cap']) if by['cap'] else 'none'} | {sum(c.steady for c in cells)} of {len(cells)} |")


def doc_table(sweeps: list[Sweep]) -> str:
    """docs/findings.md's table: the :data:`DOC_SETS` and all sets."""
    lines = ["| set | steady warm-up cells | plateau time: every GPU's 15 s slope <= 1 degC/min (median of the "
             "largest) | 30 s slope <= 1 / <= 2 degC/min (median) | 30 s slope x max(measured duration, 30 s) < 1 "
             "degC | measured-window slope (degC/min), cells flagged steady | flagged cap | thermally steady |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [doc_row(f"`{s.name}`", s.cells) for name in DOC_SETS for s in sweeps if s.name == name]
    lines.append(doc_row(f"all {len(sweeps)} sets with steady warm-ups", [c for s in sweeps for c in s.cells]))
    return "\n".join(lines) + "\n"


def region(tag: str) -> re.Pattern[str]:
    """A generated table's place in a document: between ``<!-- BEGIN <tag>...-->`` and ``<!-- END <tag> -->``, both
    indented alike."""
    tag = re.escape(tag)
    return re.compile(rf"(?P<begin>( *)<!-- BEGIN {tag}[^\n]*-->\n).*?(?P<end>\2<!-- END {tag} -->)", re.S)


def write_doc(path: Path, table: str, tag: str = "bench/steady_criterion.py") -> None:
    """Replace the table between the document's markers (indented as the markers are)."""
    text = path.read_text()
    m = region(tag).search(text)
    if m is None:
        raise SystemExit(f"{path}: no <!-- BEGIN {tag} --> ... <!-- END {tag} --> region")
    indent = m.group(2)
    body = "".join(f"{indent}{line}\n" for line in table.splitlines())
    path.write_text(text[:m.start()] + m.group("begin") + body + m.group("end") + text[m.end():])
    print(f"wrote the table of {path}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, nargs="?", default=Path("results/reference"))
    ap.add_argument("--sets", nargs="*", default=[], help="only sweeps whose path contains one of these")
    ap.add_argument("--doc", type=Path, help="also rewrite this document's table (docs/findings.md)")
    args = ap.parse_args()
    if args.doc and args.sets:
        ap.error("--doc needs every set (its last row is all sets together): leave out --sets")
    sweeps = []
    for plan in sorted(args.root.rglob("plan.json")):
        name = plan.parent.relative_to(args.root).as_posix()
        if args.sets and not any(s in name for s in args.sets):
            continue
        cells = [c for d in sorted((plan.parent / "cells").glob("*")) if (d / "run.json").is_file()
                 and (c := read_cell(d)) is not None]
        if cells:
            sweeps.append(Sweep(name, cells))
            print(f"{name}: {len(cells)} cells", file=sys.stderr, flush=True)
    print("| set | steady warm-up cells | plateau time: all 15 s slopes <= 1 degC/min | median max 15 s slope | "
          "plateau time: all 30 s slopes <= 1 | 30 s <= 2 | median max 30 s slope | drift rule (30 s slope x "
          "max(measured duration, 30 s) < 1 degC) | measured-window max slope (degC/min), runtime flag steady: n, "
          "median (range) | flag cap: n, median (range) | thermally steady (drift < 1 degC) | recorded warm-up (s), "
          "median (range) | drift rule replayed: ends within the recorded warm-up, after (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sweeps:
        print(row(f"`{s.name}`", s.cells))
    if len(sweeps) > 1:
        print(row(f"all {len(sweeps)} sets", [c for s in sweeps for c in s.cells]))
    if args.doc:
        write_doc(args.doc, doc_table(sweeps))


if __name__ == "__main__":
    main()
