"""Projection accuracy on held-out current-engine cells, per regime: the targets, from the committed measurements.

    python bench/projection_validation.py [--out validation.json] [--table validation.csv.gz] [--doc docs/projection.md]
    python bench/projection_validation.py --from-json validation.json --doc docs/projection.md   # the doc only

Leave one configuration out over every committed set (findings on 2x H200 and 1x H100, TP overlap, placement,
fidelity, the engine benchmark, the host-bound sets, any committed calibration sweep, and the 2026-11-21 engine's
2-8 GPU sets): every configuration (its repetitions together) is predicted from a calibration on all the others of
its engine; then the extrapolation folds (every cell at one GPU count, sequence, micro-batch or model size predicted
from the cells below it; an engine's MoE cells from its dense ones), then every other calibration predicting the
current cells (cross-fingerprint). Prints, per current engine: median |error| of tokens/s/GPU, energy per token and
average power, the largest |error|, the mean signed error, the band coverage; per regime (dense GPU-bound, dense
host-bound, MoE, each extrapolation within them): errors, median band, rows within their band with the 90% interval
of that share (binomial), whether the stated coverage holds; the band each regime gives a projected row (the
calibration of every committed cell) and the spread between machines; whether the targets hold (median <= 5%
tokens/s and energy/token, <= 3% power, max <= 15%, mean signed within +-2%, coverage met in every regime).
``--doc`` rewrites the generated block of docs/projection.md from the summary. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from calorimeter.projection.accuracy import loco_summary, machine_spread  # noqa: E402
from calorimeter.projection.bands import apply_validation, band_summary  # noqa: E402
from calorimeter.projection.calibration import calibrate_all, collective_points  # noqa: E402
from calorimeter.projection.catalogue import catalogue  # noqa: E402
from calorimeter.projection.measured import catalogue_disagreements, load_measured  # noqa: E402
from calorimeter.projection.report import write_doc_block  # noqa: E402
from calorimeter.projection.settings import ProjectionSettings  # noqa: E402
from calorimeter.projection.validation import loco, newest_fingerprints  # noqa: E402

SHOWN = ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w", "iteration_time_s", "mfu_full")
BANDED = ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w")


def _pct(x: float, sign: bool = False) -> str:
    return "  n/a" if x != x else (f"{x:+6.1%}" if sign else f"{x:6.1%}")


def _verdict(r: dict) -> str:
    """A regime's coverage verdict: no band (every row refused, or no band stated) is not a coverage met."""
    if not r.get("banded"):
        return "no band"
    return "met" if r["met"] else "NOT MET"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the summary (validation.json) here")
    ap.add_argument("--table", type=Path, help="write the per-cell table (CSV) here")
    ap.add_argument("--doc", type=Path, help="rewrite the generated block of this doc (docs/projection.md)")
    ap.add_argument("--from-json", type=Path, help="a summary written by --out: only rewrite --doc from it")
    args = ap.parse_args()
    if args.from_json:
        if args.doc:
            write_doc_block(args.doc, json.loads(args.from_json.read_text()), str(args.from_json))
        return
    s = ProjectionSettings.from_config({}, ROOT)
    t0 = time.perf_counter()
    ms = load_measured([str(ROOT / p) for p in s.calibration])
    fps = newest_fingerprints(ms)
    points = collective_points([str(ROOT / p) for p in s.collectives])
    table = loco(ms, fps, points, coverage=s.coverage)
    summary = loco_summary(table, s.coverage, fps)
    cals = calibrate_all([], [str(ROOT / p) for p in s.collectives], ms=ms)
    apply_validation(cals, table, s.coverage)
    summary["bands"] = band_summary({k: c for k, c in cals.items() if k.split("/", 1)[1] in fps.values()})
    print(f"{len(ms.runs)} measured cells from {len(s.calibration)} sources; {time.perf_counter() - t0:.1f} s")
    for line in catalogue_disagreements(ms, catalogue(ROOT), ROOT):
        print(f"catalogue: {line}")
    for key, g in summary["groups"].items():
        print(f"\n== {key}: {g['cells']} held-out cells ({g['gpu_bound_cells']} GPU-bound), {g['folds']} folds "
              f"(configurations); stated band coverage {s.coverage:.0%}")
        for src in g["sources"]:
            print(f"   source {Path(src).relative_to(ROOT) if Path(src).is_absolute() else src}")
        for m in SHOWN:
            v = g[m]
            print(f"  {m:22s} median |err| {v['median_abs']:6.1%} (GPU-bound {v['median_abs_gpu_bound']:6.1%})  "
                  f"max {v['max_abs']:6.1%} ({v['max_abs_gpu_bound']:6.1%})  mean signed {v['mean_signed']:+6.1%} "
                  f"({v['mean_signed_gpu_bound']:+6.1%})  coverage {v.get('coverage', math.nan):5.0%} of "
                  f"{v.get('banded', 0)} (median band +-{v.get('band_median', math.nan):.1%})  n={v['cells']}")
        for m in BANDED:
            v = g[m]
            print(f"  {m:22s} in calibrated range ({v['cells_in_range']}): median {v['median_abs_in_range']:5.1%} "
                  f"max {v['max_abs_in_range']:5.1%} mean signed {v['mean_signed_in_range']:+5.1%}; "
                  f"configurations on a machine, repetitions averaged ({v['cells_per_machine']}): median "
                  f"{v['median_abs_per_machine']:5.1%} max {v['max_abs_per_machine']:5.1%} "
                  f"mean signed {v['mean_signed_per_machine']:+5.1%}")
        print("  per regime, tokens/s (held-out configurations of this engine):")
        for regime, r in g["tokens_per_s_per_gpu"].get("regimes", {}).items():
            print(f"    {regime:50s} n={r['rows']:3d} median {_pct(r['median_abs'])} max {_pct(r['max_abs'])} "
                  f"band +-{_pct(r['band_median'])} within {r['covered']}/{r['banded']} (90% "
                  f"{r['coverage_90'][0]:.0%}-{r['coverage_90'][1]:.0%}) {_verdict(r)}")
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
            for m in BANDED:
                e, c = f[m]["mean_signed"], f[m]["covered"]
                parts.append(f"{e:+6.1%} [{'-' if c != c else ('in' if c >= 0.5 else 'OUT')}]" if e == e
                             else "   n/a      ")
            name = fold.split(": ", 1)[-1]
            print(f"    {name[:92]:92s} n={f['cells']} {'  '.join(parts)}"
                  + (f"  ({'; '.join(f['notes'])[:160]})" if f["notes"] else ""))
    print("\n== per regime, every engine's held-out and extrapolation rows (a row counts in each of its regimes); "
          "within band: rows inside the band the other folds give them (90% interval, binomial)")
    for m in BANDED:
        print(f"  {m}:")
        for regime, r in summary["regimes"][m].items():
            print(f"    {regime:50s} n={r['rows']:4d} median {_pct(r['median_abs'])} max {_pct(r['max_abs'])} "
                  f"mean signed {_pct(r['mean_signed'], True)} band +-{_pct(r['band_median'])} within "
                  f"{r['covered']:3d}/{r['banded']:3d} ({r['coverage_90'][0]:.0%}-{r['coverage_90'][1]:.0%}) "
                  f"{_verdict(r)}  [{', '.join(r['engines'])}]")
    print("\n== the band a projected row takes, per regime (calibration of every committed cell; tokens/s, energy per "
          "token, power; x: the measured distance beyond the range, doubled per doubling beyond it)")
    for key, b in summary["bands"].items():
        print(f"  {key}:")
        for regime, r in b["regimes"].items():
            if r["band"]:
                bd, x = r["band"], r["factor"]
                print(f"    {regime:50s} +-{_pct(bd.get('tokens_per_s_per_gpu', math.nan))} "
                      f"+-{_pct(bd.get('energy_per_token_j', math.nan))} +-{_pct(bd.get('power_avg_w', math.nan))} "
                      f"({r['rows']} rows{'' if r['pure'] else ', mixed'}{f', x{x:.3g}' if x == x else ''}; "
                      f"{', '.join(r['sources'])[:140]})")
            else:
                print(f"    {regime:50s} refused: {r['reason'][:400]}")
        for base, sp in b["machine_spread"].items():
            print(f"    spread between machines, {base}: " + ", ".join(f"{m} +-{sp[m]:.1%}" for m in BANDED if m in sp))
    print("\n== cross-fingerprint (another engine build or GPU type predicting these cells; and the current "
          "calibration on another engine's MoE cells)")
    for fold, c in summary["cross_fingerprint"].items():
        print(f"  {fold} [{c['relation']}], {c['cells']} cells: " + ", ".join(
            f"{m} {c[m]['quantile_abs']:.1%} (mean signed {c[m]['mean_signed']:+.1%})"
            for m in BANDED if c[m]["quantile_abs"] == c[m]["quantile_abs"]))
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
    text = json.dumps(summary, indent=1, default=float).replace(here, "")
    if args.out:
        args.out.write_text(text + "\n")
    if args.doc:
        write_doc_block(args.doc, json.loads(text), str(args.out or "bench/projection_validation.py"))
    if args.table:
        cols = table.select_dtypes(exclude="number").columns  # compressed when the name ends .gz (pandas)
        table.assign(**{c: table[c].astype(str).str.replace(here, "", regex=False) for c in cols}).to_csv(
            args.table, index=False)


if __name__ == "__main__":
    main()
