"""The artifact-evaluation subcommands of ``calorimeter``: ``compare``, ``rebuild``, ``export`` and
``project-study``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _floors(items: list[str] | None) -> dict[str, float]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--floor {item!r}: give METRIC=VALUE, e.g. power_peak_w=0.2")
        try:
            out[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--floor {item!r}: {value!r} is not a number") from None
    return out


def _compare(args: argparse.Namespace) -> int:
    import pandas as pd

    # heavy: pandas and matplotlib, imported only when the command runs (keeps `calorimeter --help` fast)
    from calorimeter.reproduce.compare import NOT_COMPARABLE, VERDICTS, compare, exit_code, figure_counts, overall
    from calorimeter.reproduce.metrics import metrics_with_floors
    from calorimeter.reproduce.noise import load_noise
    from calorimeter.reproduce.report import write_outputs  # heavy: matplotlib
    from calorimeter.reproduce.sources import load_source  # heavy: pandas

    try:
        metrics = metrics_with_floors(_floors(args.floor))
        noise = load_noise(args.noise)
        ref, rep = load_source(args.reference), load_source(args.reproduction)
    except (argparse.ArgumentTypeError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    result = compare(ref, rep, metrics, subset=args.subset, noise=noise)
    counts = figure_counts(result)
    out = Path(args.out) if args.out else Path(args.reproduction) / "compare"
    write_outputs(result, counts, out, str(args.reference), str(args.reproduction))
    print(f"reference {args.reference}: {', '.join(ref.sweeps)}; reproduction {args.reproduction}: "
          f"{', '.join(rep.sweeps)}")
    with pd.option_context("display.width", 250, "display.max_colwidth", 120):
        if not args.summary:
            shown = result[result["verdict"] != NOT_COMPARABLE] if not args.all else result
            print(shown[["config_id", "metric", "verdict", "reason"]].to_string(index=False))
        nc = result[result["verdict"] == NOT_COMPARABLE].drop_duplicates(["config_id", "reproduction_config_id",
                                                                          "reason"])
        for _, r in nc.iterrows():
            print(f"not comparable: {r['config_id'] or r['reproduction_config_id']}: {r['reason']}")
    for _, c in counts.iterrows():
        n = ", ".join(f"{c[v]} {v}" for v in VERDICTS if c[v])
        print(f"{c['figure']}: {c['verdict']} ({n or 'no row'}" + (f"; noise {c['noise']})" if c["noise"] else ")"))
    print(f"{overall(result).upper()}: written {out}/compare.csv, compare_counts.csv, compare.html, compare.png")
    return exit_code(result)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``compare`` (and ``export``) on the ``calorimeter`` parser."""
    c = sub.add_parser("compare", help="check a reproduction against reference records: per configuration and "
                       "metric the difference, the run-to-run noise it is judged against and a verdict (reproduced, "
                       "not reproduced, cannot tell, not comparable); per figure and overall the verdict of its rows "
                       "(docs/artifact.md)", description="Exit status: 0 reproduced (every comparable metric), 1 not "
                       "reproduced (a metric beyond its tolerance, a reference configuration missing, or nothing "
                       "comparable), 3 cannot tell (nothing beyond its tolerance, but the noise hides a difference "
                       "of a floor's size somewhere), 2 the command could not run.")
    c.add_argument("reference", help="folder of the reference: a sweep, a set of sweeps (results/reference/<set>) "
                   "or a tables folder")
    c.add_argument("reproduction", help="folder of the reproduction (the same forms)")
    c.add_argument("--out", help="where to write compare.csv/.html/.png (default: REPRODUCTION/compare)")
    c.add_argument("--floor", action="append", metavar="METRIC=VALUE",
                   help="replace a metric's tolerance floor, the smallest difference that counts (a fraction for "
                   "ratios, °C for temperatures), e.g. --floor power_peak_w=0.2; repeatable")
    c.add_argument("--noise", metavar="FILE", help="the noise model (default: this checkout's "
                   "config/compare-noise.json, made by `python -m calorimeter.reproduce.noise --write`)")
    c.add_argument("--subset", action="store_true", help="the reproduction measured only some of the reference's "
                   "configurations on purpose: the others are not reported as missing")
    c.add_argument("--summary", action="store_true", help="print the verdict per figure and overall, not every row")
    c.add_argument("--all", action="store_true", help="print the not-comparable rows too")
    c.set_defaults(func=_compare)
    add_rebuild(sub)
    add_export(sub)
    add_project_study(sub)


def _rebuild(args: argparse.Namespace) -> int:
    from calorimeter.reproduce.rebuild import copy_records, plan_rebuild, run_rebuild, shown  # heavy: pandas, yaml

    ref = Path(args.reference)
    out = Path(args.out) if args.out else Path("results") / "rebuild" / ref.name
    from calorimeter.projection.engine_speed import is_engine_speed_set

    if is_engine_speed_set(ref) and not args.dry_run:  # a benchmark set: no sweep to rebuild, its figure to draw
        return _engine_speed_figure(ref, out)
    try:
        steps = plan_rebuild(ref, out, args.cores, args.report)
        if args.dry_run:
            for st in steps:
                print(f"{st.sweep}: " + (shown(st.command) if st.command else "no config/reference file"))
            return 0
        copy_records(ref, out)
    except (FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rc = run_rebuild(steps)
    print(f"rebuilt into {out} (the committed {ref} is untouched); check it with: calorimeter compare {ref} {out}")
    return rc


def _engine_speed_figure(ref: Path, out: Path) -> int:
    """Draw the figure of an engine-benchmark set (no sweep tables) into ``out/figures``."""
    import json

    from calorimeter.figures.common import save
    from calorimeter.figures.engine_speed import NAME, draw_set
    from calorimeter.records.atomic import write_atomic

    figures = out / "figures"
    if (figures / f"{NAME}.png").exists():
        print(f"error: {figures / NAME}.png exists: remove it or choose another --out (nothing is overwritten)",
              file=sys.stderr)
        return 2
    figures.mkdir(parents=True, exist_ok=True)
    fig, res = draw_set(ref)
    save(fig, figures / f"{NAME}.png", figures / f"{NAME}.pdf")
    text = json.dumps(res.to_dict(), indent=1) + "\n"
    write_atomic(figures / f"{NAME}.json", lambda tmp: tmp.write_text(text))
    print(f"{ref} is an engine-benchmark set (no sweep): drew {figures / NAME}.png ({res.n_points} variants)")
    return 0


def add_rebuild(sub: argparse._SubParsersAction) -> None:
    """Register ``rebuild``."""
    r = sub.add_parser("rebuild", help="rebuild a committed reference set's tables, figures and findings in a scratch "
                       "folder (results/rebuild/<set>), never next to the committed files")
    r.add_argument("reference", help="a committed set (results/reference/<set>) or one of its sweeps")
    r.add_argument("--out", help="the scratch results folder (default results/rebuild/<set>; must not hold the set's "
                   "sweeps yet)")
    r.add_argument("--cores", type=int, default=2)
    r.add_argument("--report", action="store_true", help="also write <out>/<sweep>/report.html")
    r.add_argument("--dry-run", "-n", action="store_true", help="print the snakemake commands; copy and run nothing")
    r.set_defaults(func=_rebuild)


def _export(args: argparse.Namespace) -> int:
    from calorimeter.reproduce.charllm import export_charllm  # heavy: pandas, numpy

    try:
        exp = export_charllm(args.sweep, args.out, args.window, args.repeat)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(len(v) for v in exp.runs.values())
    print(f"exported {len(exp.runs)} cells ({n} run folders) to {args.out}/results; manifest "
          f"{args.out}/calorimeter_manifest.json")
    for cid, why in exp.skipped.items():
        print(f"  not exported: {cid}: {why}")
    return 0


def add_export(sub: argparse._SubParsersAction) -> None:
    """Register ``export``."""
    e = sub.add_parser("export", help="write a sweep's records in another tool's layout (charllm-ppt: the MICRO'25 "
                       "artifact's per-rank files, so its plotting scripts draw calorimeter measurements)")
    e.add_argument("--format", required=True, choices=("charllm-ppt",))
    e.add_argument("sweep", help="a sweep folder with cells/ (results/<sweep>)")
    e.add_argument("out", help="the artifact's CharLLM-PPT folder to write (results/... and a manifest go there)")
    e.add_argument("--window", choices=("last-step", "measured"), default="last-step",
                   help="per rank: its last measured step (the artifact's one-iteration window; default) or every "
                   "measured step")
    e.add_argument("--repeat", type=int, default=0, help="which repetition to export (default 0)")
    e.set_defaults(func=_export)


def _project_study(args: argparse.Namespace) -> int:
    from calorimeter.reproduce.study import project_study  # heavy: pandas, matplotlib, the fitted model

    try:
        done = project_study(args.out, args.calibration, args.results_dir, figures=not args.no_figures)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    unusable = {r for s in done for r in s.rows["reason"].dropna() if str(r).startswith("no usable calibration")}
    if unusable:
        print(f"error: {unusable.pop()} (every cell refused; written {args.out}/README.md)", file=sys.stderr)
        return 1
    for s in done:
        st = s.rows["status"].value_counts().to_dict()
        print(f"{s.file}: {', '.join(f'{n} {k}' for k, n in st.items())}; {s.cost.lines()[0]}"
              + (f"; measured cells drawn from {s.measured}" if s.measured else ""))
    print(f"written {args.out}/README.md, cost.csv, <sweep>/projected.csv" + ("" if args.no_figures else
                                                                                ", figures/"))
    return 0


def add_project_study(sub: argparse._SubParsersAction) -> None:
    """Register ``project-study``."""
    p = sub.add_parser("project-study", help="project the study's four sweeps at its scale (32-64 GPUs) with bands "
                       "and their cost, and draw the study's figures from them, marked projected (nothing runs)")
    p.add_argument("--calibration", help="a folder with calibration.json and timing.json (default: the committed "
                   "set), or a calibration.json just fitted by `snakemake projection` (copied to --out, with the "
                   "start-up measured on its sources)")
    p.add_argument("--out", default="results/study-projected", help="where to write (default results/study-projected)")
    p.add_argument("--results-dir", default="results", help="where measured study sweeps would be: their cells are "
                   "drawn beside the projected ones (default results)")
    p.add_argument("--no-figures", action="store_true", help="the tables, cost and README only")
    p.set_defaults(func=_project_study)
