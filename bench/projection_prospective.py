"""Projection accuracy on cells measured after the model was fixed: the prospective check (docs/projection.md).

    python bench/projection_prospective.py NEW_SWEEP [NEW_SWEEP ...] [--table out.csv]

The leave-one-configuration-out validation (bench/projection_validation.py) scores a model on the cells it was
designed with; a rule chosen after seeing them (a band, an idle model) is not tested by it
(:mod:`calorimeter.projection.prospective` projects the new cells; this script prints). Here the calibration is
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.projection.accuracy import coverage_interval  # noqa: E402
from calorimeter.projection.prospective import CHECKED, project_new  # noqa: E402
from calorimeter.projection.settings import ProjectionSettings  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("new", nargs="+", type=Path, help="sweep folders measured after the model was fixed")
    ap.add_argument("--table", type=Path, help="write the per-cell table (CSV) here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = project_new(args.new, ProjectionSettings.from_config({}, ROOT), ROOT)
    t, stated = res.table, res.stated_coverage
    print(f"calibration: {len(res.calibration.runs)} measured cells from {len(res.sources)} sources (without the new "
          f"sweeps); {len(t)} new cells; {time.perf_counter() - t0:.0f} s")
    for _, row in t.iterrows():
        where = "extrapolated: " + row["extrapolated_parts"] if row["extrapolated"] else "in range"
        print(f"\n{row['cell_id']}  [{row['calibration']}, {row['relation']}; machine {row['machine'] or '-'} "
              f"x{row['host_factor']:.2f} ({row['machine_class']}); "
              f"{'host-bound' if row['host_bound'] else 'GPU-bound'} projected, GPU busy {row['busy_frac']:.0%} "
              f"measured; {where}]")
        print(f"  regime: {row['regime']}; band from: {row['band_basis'] or '-'}"
              + (f"\n  REFUSED (numbers shown to measure what it withholds): {row['refused']}" if row["refused"]
                 else ""))
        for m in CHECKED:
            cov = row[f"{m}_covered"]
            print(f"  {m:22s} measured {row[f'{m}_measured']:10.4g}  predicted {row[f'{m}_predicted']:10.4g}  "
                  f"error {row[f'{m}_rel_error']:+6.1%}  band +-{row[f'{m}_band']:5.1%}  "
                  f"{'within' if cov else ('OUTSIDE' if cov is not None else 'no band')}")
    print(f"\nover the {len(t)} new cells (stated band coverage {stated:.0%}):")
    for m in CHECKED:
        e = t[f"{m}_rel_error"]
        cov = t[f"{m}_covered"].dropna().astype(bool)
        lo, hi = coverage_interval(int(cov.sum()), len(cov))
        print(f"  {m:22s} median |err| {e.abs().median():5.1%}  max {e.abs().max():5.1%}  mean signed "
              f"{e.mean():+5.1%}  within band {int(cov.sum())}/{len(cov)} ({cov.mean():.0%}, 90% {lo:.0%}-{hi:.0%})")
    print("per regime (the row's whole regime; refused rows have no band):")
    for regime, g in t.groupby("regime"):
        parts = []
        for m in CHECKED:
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
