"""Projection accuracy on held-out current-engine cells: issue 23's targets, from the committed measurements.

    python bench/projection_validation.py [--out validation.json] [--table validation.csv.gz]

Leave one configuration out over every committed current-engine set (findings on 2x H200 and 1x H100, TP overlap,
placement, fidelity, the engine benchmark; and any committed calibration sweep): for each GPU type's newest engine
fingerprint, every configuration (its repetitions together) is predicted from a calibration on all the others. Then
every other calibration (older engine builds, the other GPU type) predicts the same cells: the cross-fingerprint
error. Prints, per GPU type and fingerprint and per fold: median |error| of tokens/s/GPU, energy per token and
average power, the largest |error|, the mean signed error, the band coverage (band = the stated-coverage quantile of
the other folds' errors); whether the targets hold (median <= 5% tokens/s and energy/token, <= 3% power, max <= 15%,
mean signed within +-2%, coverage met), over all held-out cells and over the GPU-bound ones. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.projection.calibration import collective_points  # noqa: E402
from calorimeter.projection.measured import load_measured  # noqa: E402
from calorimeter.projection.settings import ProjectionSettings  # noqa: E402
from calorimeter.projection.validation import loco, loco_summary, machine_spread, newest_fingerprints  # noqa: E402

SHOWN = ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w", "iteration_time_s", "mfu_full")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the summary (validation.json) here")
    ap.add_argument("--table", type=Path, help="write the per-cell table (CSV) here")
    args = ap.parse_args()
    s = ProjectionSettings.from_config({}, ROOT)
    t0 = time.perf_counter()
    ms = load_measured([str(ROOT / p) for p in s.calibration])
    fps = newest_fingerprints(ms)
    table = loco(ms, fps, collective_points([str(ROOT / p) for p in s.collectives]), coverage=s.coverage)
    summary = loco_summary(table, s.coverage)
    print(f"{len(ms.runs)} measured cells from {len(s.calibration)} sources; {time.perf_counter() - t0:.1f} s")
    for key, g in summary["groups"].items():
        print(f"\n== {key}: {g['cells']} held-out cells ({g['gpu_bound_cells']} GPU-bound), {g['folds']} folds "
              f"(configurations); stated band coverage {s.coverage:.0%}")
        for src in g["sources"]:
            print(f"   source {Path(src).relative_to(ROOT)}")
        for m in SHOWN:
            v = g[m]
            print(f"  {m:22s} median |err| {v['median_abs']:6.1%} (GPU-bound {v['median_abs_gpu_bound']:6.1%})  "
                  f"max {v['max_abs']:6.1%} ({v['max_abs_gpu_bound']:6.1%})  mean signed {v['mean_signed']:+6.1%} "
                  f"({v['mean_signed_gpu_bound']:+6.1%})  coverage {v.get('coverage', float('nan')):5.0%} "
                  f"(projected host-bound {v.get('coverage_host_bound', float('nan')):4.0%} of "
                  f"{v.get('cells_host_bound', 0)}, others {v.get('coverage_gpu_bound', float('nan')):4.0%}; "
                  f"median band +-{v.get('band_median', float('nan')):.1%})  n={v['cells']}")
        for m in ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w"):
            v = g[m]
            print(f"  {m:22s} in calibrated range ({v['cells_in_range']}): median {v['median_abs_in_range']:5.1%} "
                  f"max {v['max_abs_in_range']:5.1%} mean signed {v['mean_signed_in_range']:+5.1%}; "
                  f"configurations on a machine, repetitions averaged ({v['cells_per_machine']}): median "
                  f"{v['median_abs_per_machine']:5.1%} max {v['max_abs_per_machine']:5.1%} "
                  f"mean signed {v['mean_signed_per_machine']:+5.1%}")
        print(f"  targets, all held-out cells: {g['targets_met']}")
        print(f"  targets, GPU-bound cells:    {g['targets_met_gpu_bound']}")
        print(f"  targets, in calibrated range: {g['targets_met_in_range']}")
        print(f"  targets, configurations on a machine (repetitions averaged): {g['targets_met_per_machine']}")
        for regime, sp in g["run_spread"].items():
            pm = sp["p_max_within_target"]
            print(f"  run-to-run, {regime}: tokens/s of a run about its configuration's mean on its machine: SD "
                  f"{sp['sd_log']:.1%} (90% {sp['sd_log_90'][0]:.1%}-{sp['sd_log_90'][1]:.1%}, {sp['dof']} dof, "
                  f"{sp['groups_repeated']} repeated groups); a prediction exact for every configuration on every "
                  f"machine stays within the max target on all {sp['runs']} runs with probability {pm['sd']:.0%} "
                  f"({pm['sd_high']:.0%}-{pm['sd_low']:.0%})")
        print("  per fold: tokens/s, energy/token, power: mean signed error [covered]; notes")
        for fold, f in g["per_fold"].items():
            parts = []
            for m in ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w"):
                e, c = f[m]["mean_signed"], f[m]["covered"]
                parts.append(f"{e:+6.1%} [{'-' if c != c else ('in' if c >= 0.5 else 'OUT')}]" if e == e
                             else "   n/a      ")
            name = fold.split(": ", 1)[-1]
            print(f"    {name[:92]:92s} n={f['cells']} {'  '.join(parts)}"
                  + (f"  ({'; '.join(f['notes'])[:160]})" if f["notes"] else ""))
    print("\n== cross-fingerprint (another engine build or GPU type predicting these cells)")
    for fold, c in summary["cross_fingerprint"].items():
        print(f"  {fold} [{c['relation']}], {c['cells']} cells: " + ", ".join(
            f"{m} {c[m]['quantile_abs']:.1%} (mean signed {c[m]['mean_signed']:+.1%})"
            for m in ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w") if c[m]["quantile_abs"] ==
            c[m]["quantile_abs"]))
    summary["machine_spread"] = {k: v for k, v in machine_spread(ms).items() if k.split("/", 1)[1] in fps.values()}
    print("\n== one configuration on several machines (GPU UUIDs): slowest / fastest machine's mean iteration time")
    for key, sp in summary["machine_spread"].items():
        print(f"  {key}: " + "; ".join(
            f"{kind.replace('_', '-')}: {v['configurations']} configurations, max {v['max_ratio']:.3f}x (within one "
            f"machine, repetitions: max {v['within_machine_max_ratio']:.3f}x)"
            for kind, v in sp.items() if kind in ("host_bound", "gpu_bound")))
        for c in sp["configurations"]:
            kind = "host-bound" if c["host_bound"] else "GPU-bound "
            times = ", ".join(f"{m} {t:.3f} s" for m, t in c["machines"].items())
            print(f"    {c['ratio']:.3f}x {kind} {c['configuration'][:92]} {times}")
    here = str(ROOT) + "/"  # the files name sources relative to the repository, never this machine's paths
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1, default=float).replace(here, "") + "\n")
    if args.table:
        text = table.select_dtypes(exclude="number").columns  # compressed when the name ends .gz (pandas)
        table.assign(**{c: table[c].astype(str).str.replace(here, "", regex=False) for c in text}).to_csv(
            args.table, index=False)


if __name__ == "__main__":
    main()
