"""The study at its own scale, projected: its four sweeps (4x8 H200, 8x8 H100) with bands, what they cost, and
the study's figures drawn from the projected rows.

``calorimeter project-study`` and the workflow's ``study_projection`` rule (``make run`` draws them) write, per
study sweep, ``<sweep>/projected.csv`` (every cell of the plan: projected with its bands and projected wall time,
refused with the reason, or pruned), the figure the study draws from that sweep (``figures/``), ``cost.csv`` (per
sweep: cells by status, GPU-hours with the band) and a README naming the calibration, the date and the command that
rebuilds it. Where a study sweep was measured (``<results_dir>/<sweep>/tables/runs.parquet``), its measured cells are
drawn beside the projected ones.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from calorimeter.figures.common import save
from calorimeter.figures.projected_study import draw, output_name
from calorimeter.plan.plan import Plan, plan_file
from calorimeter.projection.catalogue import repo_root
from calorimeter.projection.cost import (
    CALIBRATION_FILE,
    TIMING_FILE,
    SweepCost,
    committed_set,
    measure_timing,
    sweep_cost,
)
from calorimeter.projection.coverage import reason_kind
from calorimeter.projection.study import StudyProjector, plan_rows
from calorimeter.records.atomic import write_atomic, write_json_atomic

#: the study's sweep files (relative to the repository) and the figure the study draws from each (the H100 sweep
#: has no figure of its own in the study: drawn as its Fig. 8)
STUDY_SWEEPS: dict[str, str] = {
    "config/sweeps/h200-parallelism.yaml": "fig04_parallelism",
    "config/sweeps/h200-optimization.yaml": "fig08_optimization",
    "config/sweeps/h200-microbatch.yaml": "fig13_microbatch",
    "config/sweeps/h100-optimization.yaml": "fig08_optimization",
}
#: the columns of the committed tables (what the figures, the cost and a reader need; the workflow's projection
#: tables keep the time split as well)
COLUMNS = (
    "cell_id", "sweep", "model", "hardware", "nodes", "gpus_per_node", "world_size", "tp", "pp", "dp", "ep",
    "sequence_parallel", "zero_stage", "recompute", "overlap", "micro_batch", "global_batch", "seq_len", "kind",
    "parallel_label", "optimization_label", "pp_split", "placement", "repeat", "status", "reason",
    *(f"{m}{s}" for m in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "power_avg_w", "energy_per_token_j")
      for s in ("", "_low", "_high")),
    "efficiency", "host_bound", "extrapolated", "extrapolated_parts", "band_coverage", "calibration",
    "calibration_relation", "calibrated", "assumed", "projected_wall_s", "projected_wall_low_s",
    "projected_wall_high_s",
)  # fmt: skip


@dataclass
class StudySweep:
    """One study sweep, projected."""

    file: str
    figure: str
    plan: Plan
    rows: pd.DataFrame
    cost: SweepCost
    measured: str = ""


def figure_file(figure: str, sweep: str) -> str:
    """``projected_fig08_optimization-h200-optimization.png``."""
    return f"{output_name(figure)}-{sweep}.png"


def outputs(out: str | Path, sweeps: dict[str, str] | None = None) -> list[Path]:
    """Every file :func:`project_study` writes under ``out`` (the workflow's rule outputs)."""
    out = Path(out)
    files = [out / "README.md", out / "cost.csv"]
    for f, fig in (sweeps or STUDY_SWEEPS).items():
        name = Path(f).stem
        files += [out / name / "projected.csv", out / "figures" / figure_file(fig, name)]
    return files


def _measured(results_dir: Path | None, sweep: str) -> dict[str, pd.DataFrame]:
    """A study sweep's measured tables where they exist."""
    if results_dir is None:
        return {}
    tables = Path(results_dir) / sweep / "tables"
    return {n: pd.read_parquet(tables / f"{n}.parquet") for n in ("runs", "configs")
            if (tables / f"{n}.parquet").is_file()}


def project_study(out: str | Path, calibration: str | Path | None = None, results_dir: str | Path | None = None,
                  figures: bool = True, root: str | Path | None = None,
                  sweeps: dict[str, str] | None = None) -> list[StudySweep]:
    """Project the study sweeps into ``out`` (module docstring).

    Args:
        calibration: a folder with calibration.json and timing.json (default: the committed set), or a
            calibration.json just fitted (``snakemake projection``): it is copied to ``out`` and the start-up is
            measured from its sources into ``out/timing.json``.
        results_dir: where measured study sweeps would be (their cells are drawn beside the projected ones).
        figures: draw the figures (the committed set keeps tables only).
        root: the repository (the sweep files and the calibration's sources are relative to it).

    A calibration fitted for another projection model is not used: every cell is then refused with the reason, and
    the README says how to rebuild the calibration.
    """
    root = Path(root) if root is not None else repo_root()
    out = Path(out)
    folder = Path(calibration) if calibration is not None else committed_set()
    if folder.is_file():  # a fresh fit: it becomes the set's calibration, with the start-up of its sources
        out.mkdir(parents=True, exist_ok=True)
        if folder.resolve() != (out / CALIBRATION_FILE).resolve():
            shutil.copyfile(folder, out / CALIBRATION_FILE)
        sources = json.loads(folder.read_text()).get("sources") or []
        write_json_atomic(out / TIMING_FILE, measure_timing(sources, root))
        folder = out
    projector = StudyProjector.from_file(folder / CALIBRATION_FILE, strict=False)
    done = []
    for file, figure in (sweeps or STUDY_SWEEPS).items():
        plan = plan_file(root / file)
        cost = sweep_cost(plan, folder)
        rows = plan_rows(plan, projector)
        walls = cost.by_id()
        for key, attr in (("projected_wall_s", "wall_s"), ("projected_wall_low_s", "wall_low_s"),
                          ("projected_wall_high_s", "wall_high_s")):
            rows[key] = [getattr(walls[c], attr) if c in walls else float("nan") for c in rows["cell_id"]]
        name = Path(file).stem
        table = rows[[c for c in COLUMNS if c in rows.columns]]
        dest = out / name / "projected.csv"
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, lambda tmp, t=table: t.to_csv(tmp, index=False, float_format="%.6g"))
        measured = _measured(Path(results_dir) if results_dir is not None else None, plan.sweep)
        if figures:
            fig, res = draw({"projected": rows, **measured}, figure)
            png = out / "figures" / figure_file(figure, name)
            png.parent.mkdir(parents=True, exist_ok=True)
            save(fig, png)
            write_json_atomic(png.with_suffix(".json"), res.to_dict())
        done.append(StudySweep(file, figure, plan, rows, cost, f"{results_dir}/{plan.sweep}" if measured else ""))
    costs = cost_table(done)
    write_atomic(out / "cost.csv", lambda tmp: costs.to_csv(tmp, index=False, float_format="%.4g"))
    readme = readme_text(done, costs, folder / CALIBRATION_FILE, out, projector.unusable)
    write_atomic(out / "README.md", lambda tmp: tmp.write_text(readme))
    return done


def cost_table(done: list[StudySweep]) -> pd.DataFrame:
    """Per study sweep: cells by status, GPU-hours with the band, wall time one cell after another."""
    rows = []
    for s in done:
        st = s.rows["status"].value_counts()
        gh, lo, hi = s.cost.gpu_hours()
        rows.append({"sweep_file": s.file, "figure": s.figure, "cells": len(s.rows),
                     "projected": int(st.get("projected", 0)), "refused": int(st.get("refused", 0)),
                     "pruned": int(st.get("pruned", 0)), "gpu_hours": gh, "gpu_hours_low": lo, "gpu_hours_high": hi,
                     "wall_h": s.cost.summary()["wall_s"] / 3600.0,
                     "gpus": ", ".join(str(g) for g in sorted(set(s.rows["world_size"])))})
    return pd.DataFrame(rows)


def readme_text(done: list[StudySweep], costs: pd.DataFrame, calibration: Path, out: Path, unusable: str = "") -> str:
    """The set's README: what it is, the calibration, the cost and refusals per sweep, how to rebuild it."""
    cal = json.loads(calibration.read_text())
    keys = sorted({k for s in done for k in s.rows.get("calibration", pd.Series(dtype=str)).dropna().astype(str)})
    used = [c for c in cal.get("calibrations", []) if c["key"] in keys]
    lines = [
        f"# The study's sweeps at their own scale, projected ({time.strftime('%Y-%m-%d')})", "",
        "Nothing here was measured. Every cell of the study's four sweeps (4 nodes x 8 H200 = 32 GPUs, 8 nodes x 8 "
        "H100 = 64 GPUs) projected by the model of docs/projection.md from the calibration in this folder "
        f"(`{CALIBRATION_FILE}`, projection model version {cal.get('model_version')}), with its bands, and what "
        "each cell would cost to run (`projected_wall_s`: start-up, warm-up, measured and profiled steps; "
        "`calorimeter plan` prints the same).", "",
        *([f"**Nothing projected: {unusable}.** Rebuild the calibration (below).", ""] if unusable else []),
        "Calibrations used (GPU type / engine fingerprint, cells fitted on, newest record, band of a GPU-bound row):",
        "",
    ]
    for c in used:
        band = c.get("error_band") or {}
        lines.append(f"- `{c['key']}`: {len(c.get('cells', []))} measured cells, newest {c.get('recorded_at') or '-'}; "
                     + ", ".join(f"{k} +-{v:.1%}" for k, v in sorted(band.items())))
    lines += ["", "| sweep | study figure | GPUs | cells | projected | refused | pruned | GPU-hours (band) | "
              "wall time, one cell after another |", "|---|---|---|---|---|---|---|---|---|"]
    for _, r in costs.iterrows():
        lines.append(f"| `{r['sweep_file']}` | {r['figure']} | {r['gpus']} | {r['cells']} | {r['projected']} | "
                     f"{r['refused']} | {r['pruned']} | {r['gpu_hours']:,.0f} ({r['gpu_hours_low']:,.0f}-"
                     f"{r['gpu_hours_high']:,.0f}) | {r['wall_h']:.1f} h |")
    lines += ["", "GPU-hours cover the projected cells only; refused and pruned cells are counted apart (each cell's "
              "reason in its table):", ""]
    for s in done:
        rs = s.rows[s.rows["status"] != "projected"]
        for (status, why), g in rs.groupby([rs["status"], rs["reason"].map(reason_kind)], sort=True):
            lines.append(f"- `{Path(s.file).stem}`: {len(g)} {status}: {why}")
    basis = sorted({b for s in done for b in s.cost.basis})
    lines += ["", "What the projected wall times rest on:", "", *(f"- {b}" for b in basis), "",
              "Files: `<sweep>/projected.csv` (one row per cell of the plan: `status` projected / refused / pruned, "
              "`reason`; every metric with `_low`/`_high`, its band at the stated coverage `band_coverage`; "
              "`host_bound`, `extrapolated` and `extrapolated_parts`, `calibrated` and `assumed`: what the row rests "
              f"on), `cost.csv`, `{CALIBRATION_FILE}`, `{TIMING_FILE}` (start-up and warm-up measured on the "
              "calibration's cells). The figures (the study's Fig. 4, 8 and 13, marked PROJECTED) are rebuilt, not "
              "kept: `figures/`.", "",
              "Rebuild (CPU, about two minutes for the fit and validation, seconds for the rest):", "", "```bash",
              "snakemake projection --configfile config/sweeps/projection-scale.yaml   # fit + validate the model",
              "calorimeter project-study --calibration results/projection-scale/projection/calibration.json "
              f"--out {out}",
              "```", "",
              "From the committed calibration alone (no refit): `calorimeter project-study` writes the same tables "
              "and draws the figures into results/study-projected/; `make run` draws them too.", ""]
    return "\n".join(lines)


__all__ = ["COLUMNS", "STUDY_SWEEPS", "StudySweep", "cost_table", "figure_file", "outputs", "project_study",
           "readme_text"]
