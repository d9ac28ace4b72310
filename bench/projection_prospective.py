"""Projection accuracy on cells measured after the model was fixed: the prospective check of issue 23.

    python bench/projection_prospective.py NEW_SWEEP [NEW_SWEEP ...] [--table out.csv]

The leave-one-configuration-out validation (bench/projection_validation.py) scores a model on the cells it was
designed with; a rule chosen after seeing them (a band, an idle model) is not tested by it. Here the calibration is
what a user gets from the committed sources without NEW_SWEEP (``projection.calibration``'s default, with the bands,
coverage and cross-fingerprint errors of its own validation, as the workflow's ``projection_calibrate`` writes them),
and every cell of NEW_SWEEP is projected as ``snakemake projection`` would for the engine that ran it
(``projection.engine`` = the cell's fingerprint: a calibration of another engine build is ``foreign``, its bands add
the measured cross-fingerprint error; its machine's host factor where the calibration knows it). Prints per cell:
measured, predicted, error, band, whether the measured value lies within it, its regime
(:mod:`calorimeter.projection.regimes`), the machine class, and a refused row's reason (its numbers are still predicted
here, to measure what a refusal withholds); then per metric the median and largest |error|, mean signed error and
coverage over the new cells (with its 90% interval: binomial, Clopper-Pearson), and the same per regime, with the
median band of the dense GPU-bound cells. Works on cells of any
GPU count (4-GPU cells: their layouts and GPU count against a 1-2 GPU calibration are an extrapolation regime).
Prints; never asserts. CPU, ~60 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.projection.calibration import calibrate_all, collective_points, machine_of  # noqa: E402
from calorimeter.projection.fingerprint import KEY_FIELDS, UNRECORDED  # noqa: E402
from calorimeter.projection.measured import load_measured  # noqa: E402
from calorimeter.projection.model import Projector  # noqa: E402
from calorimeter.projection.settings import ProjectionSettings  # noqa: E402
from calorimeter.projection.sweep import choose_calibration  # noqa: E402
from calorimeter.projection.validation import (  # noqa: E402
    apply_validation,
    coverage_interval,
    loco,
    newest_fingerprints,
)

SHOWN = ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", nargs="+", type=Path, help="sweep folders measured after the model was fixed")
    ap.add_argument("--table", type=Path, help="write the per-cell table (CSV) here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    s = ProjectionSettings.from_config({}, ROOT)
    new = [p.resolve() for p in args.new]
    train = [p for p in (str(ROOT / q) for q in s.calibration)
             if not any(Path(p).resolve().is_relative_to(n) or n.is_relative_to(Path(p).resolve()) for n in new)]
    ms = load_measured(train)
    points = collective_points([str(ROOT / p) for p in s.collectives])
    cals = calibrate_all(train, [str(ROOT / p) for p in s.collectives], ms=ms)
    apply_validation(cals, loco(ms, newest_fingerprints(ms), points, coverage=s.coverage), s.coverage)
    test = load_measured([str(p) for p in new])
    print(f"calibration: {len(ms.runs)} measured cells from {len(train)} sources (without the new sweeps); "
          f"{len(test.runs)} new cells; {time.perf_counter() - t0:.0f} s")
    rows = []
    for _, r in test.runs.iterrows():
        cell = test.cell(r["cell_id"])
        # the engine that ran it: a calibration of another build is foreign (its bands add the cross error)
        engine = {k: str(r[k]) for k in KEY_FIELDS if isinstance(r.get(k), str) and r[k] != UNRECORDED}
        cal, relation = choose_calibration(cell.hardware, cals, engine)
        p = Projector(cal, relation=relation, refuse=False).project(cell, machine_of(r))
        row = {"cell_id": r["cell_id"], "calibration": cal.key, "relation": relation, "machine": p["machine"],
               "host_factor": p["host_factor"], "host_bound": p["host_bound"], "extrapolated": p["extrapolated"],
               "extrapolated_parts": p["extrapolated_parts"], "busy_frac": r.get("busy_frac"),
               "regime": p["regime"], "band_basis": p["band_basis"], "refused": p["refused"],
               "machine_class": p["machine_class"]}
        for m in SHOWN:
            meas, pred, half = float(r[m]), float(p[m]), float(p[f"{m}_band"])
            err = pred / meas - 1.0
            row |= {f"{m}_measured": meas, f"{m}_predicted": pred, f"{m}_rel_error": err, f"{m}_band": half,
                    f"{m}_covered": bool(abs(err) <= half) if half == half else None}
        rows.append(row)
    t = pd.DataFrame(rows)
    stated = float(next(iter(cals.values())).coverage.get("stated", s.coverage))
    for _, row in t.iterrows():
        where = "extrapolated: " + row["extrapolated_parts"] if row["extrapolated"] else "in range"
        print(f"\n{row['cell_id']}  [{row['calibration']}, {row['relation']}; machine {row['machine'] or '-'} "
              f"x{row['host_factor']:.2f} ({row['machine_class']}); "
              f"{'host-bound' if row['host_bound'] else 'GPU-bound'} projected, GPU busy {row['busy_frac']:.0%} "
              f"measured; {where}]")
        print(f"  regime: {row['regime']}; band from: {row['band_basis'] or '-'}"
              + (f"\n  REFUSED (numbers shown to measure what it withholds): {row['refused']}" if row["refused"]
                 else ""))
        for m in SHOWN:
            cov = row[f"{m}_covered"]
            print(f"  {m:22s} measured {row[f'{m}_measured']:10.4g}  predicted {row[f'{m}_predicted']:10.4g}  "
                  f"error {row[f'{m}_rel_error']:+6.1%}  band +-{row[f'{m}_band']:5.1%}  "
                  f"{'within' if cov else ('OUTSIDE' if cov is not None else 'no band')}")
    print(f"\nover the {len(t)} new cells (stated band coverage {stated:.0%}):")
    for m in SHOWN:
        e = t[f"{m}_rel_error"]
        cov = t[f"{m}_covered"].dropna().astype(bool)
        lo, hi = coverage_interval(int(cov.sum()), len(cov))
        print(f"  {m:22s} median |err| {e.abs().median():5.1%}  max {e.abs().max():5.1%}  mean signed "
              f"{e.mean():+5.1%}  within band {int(cov.sum())}/{len(cov)} ({cov.mean():.0%}, 90% {lo:.0%}-{hi:.0%})")
    print("per regime (the row's whole regime; refused rows have no band):")
    for regime, g in t.groupby("regime"):
        parts = []
        for m in SHOWN:
            cov = g[f"{m}_covered"].dropna().astype(bool)
            lo, hi = coverage_interval(int(cov.sum()), len(cov))
            parts.append(f"{m.split('_')[0]} median |err| {g[f'{m}_rel_error'].abs().median():5.1%} band "
                         f"+-{g[f'{m}_band'].median():5.1%} within {int(cov.sum())}/{len(cov)} ({lo:.0%}-{hi:.0%})")
        print(f"  {regime} ({len(g)} cells): " + "; ".join(parts))
    dense = t[t["regime"].str.startswith("dense GPU-bound")]
    if len(dense):
        half = dense["tokens_per_s_per_gpu_band"].median()
        print(f"dense GPU-bound cells: median tokens/s band half-width +-{half:.1%} ({len(dense)} cells)")
    if args.table:
        t.to_csv(args.table, index=False)


if __name__ == "__main__":
    main()
