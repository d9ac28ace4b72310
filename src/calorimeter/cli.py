"""Command-line interface: ``calorimeter plan|models|run-cell|aggregate|figure|status|rerun|provenance``.

Bad input ends with ``error: <message>`` and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from calorimeter.plan.config import ConfigError


def _plan(args: argparse.Namespace) -> int:
    from calorimeter.plan.plan import format_json, format_table, plan_file
    from calorimeter.projection.cost import sweep_cost

    plan = plan_file(args.sweep)
    cost = sweep_cost(plan, args.calibration)
    costs = cost.by_id()
    if args.format == "json":
        per_cell = {cid: {"projected_wall_s": c.wall_s, "projected_wall_low_s": c.wall_low_s,
                          "projected_wall_high_s": c.wall_high_s, "not_projected": c.why_not}
                    for cid, c in costs.items()}
        print(format_json(plan, per_cell, projected_cost=cost.summary()))
    else:
        print(format_table(plan, {"projected_wall": {cid: c.describe() if c.projected else "not projected"
                                                     for cid, c in costs.items()}}))
        print("\n".join(cost.lines()))
    return 0


def _models(args: argparse.Namespace) -> int:
    from calorimeter.plan.hardware import PROFILES
    from calorimeter.plan.models import CATALOGUE, parameter_count

    if getattr(args, "sweep", None):  # the sweep's own models and hardware too (docs/models.md)
        from calorimeter.plan.plan import plan_file

        plan_file(args.sweep)
    print(f"{'model':<18}{'family':<9}{'layers':>7}{'hidden':>7}{'heads':>6}{'kv':>4}{'experts':>8}{'params':>10}")
    for m in CATALOGUE.values():
        n = parameter_count(m)
        size = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"
        print(f"{m.name:<18}{m.family:<9}{m.num_layers:>7}{m.hidden_size:>7}{m.num_attention_heads:>6}"
              f"{m.num_query_groups:>4}{m.num_experts:>8}{size:>10}")
    print("\nhardware: " + ", ".join(f"{p.name} ({p.gpus_per_node}/node, {p.memory_gb:g} GB, peak "
                                     f"{p.peak_bf16_tflops or 'n/a'} TFLOP/s)" for p in PROFILES.values()))
    return 0


def _run_cell(args: argparse.Namespace) -> int:
    from calorimeter.launch.run import run_cell
    from calorimeter.launch.settings import launcher_settings
    from calorimeter.plan.plan import plan_file
    from calorimeter.records.paths import CellPaths

    plan = plan_file(args.sweep)
    try:
        pc = plan.get(args.cell)
    except KeyError:
        from calorimeter.plan.config_errors import short, suggest

        raise ConfigError(f"no cell {short(args.cell)} in sweep {plan.sweep}"
                          f"{suggest(args.cell, [c.cell.cell_id for c in plan.cells])} (see `calorimeter plan "
                          f"{args.sweep}`)") from None
    if pc.status != "planned":
        raise ConfigError(f"cell {args.cell} is pruned: {'; '.join(pc.reasons)}")
    rec = run_cell(pc.cell, launcher_settings(plan.config), CellPaths.of(plan.results_dir, pc.cell.sweep,
                                                                          pc.cell.cell_id), pc.estimates)
    print(f"{rec['cell_id']}: {rec['status']} {rec.get('reason', '')}")
    return 0


def _aggregate(args: argparse.Namespace) -> int:
    from calorimeter.analysis.summary import summarize
    from calorimeter.analysis.tables import write_table
    from calorimeter.plan.plan import plan_file
    from calorimeter.records.paths import SweepPaths

    plan = plan_file(args.sweep)
    notes: list[str] = []
    df = summarize(plan, notes=notes)
    for note in notes:
        print(f"note: damaged record: {note}", file=sys.stderr)
    out = SweepPaths.of(plan.results_dir, plan.sweep)
    write_table(df, out.summary_parquet, out.summary_csv)
    print(df["status"].value_counts().to_string())
    return _nothing_measured(df, plan.sweep)


def _damaged_notes(runs: object) -> list[str]:
    """One line per cell of a summary whose record was damaged: unreadable (status corrupt) or with files left
    out (see :mod:`calorimeter.analysis.damaged`)."""
    import pandas as pd

    assert isinstance(runs, pd.DataFrame)
    out = []
    for _, row in runs.iterrows():
        notes = str(row.get("data_notes") or "") if row.get("data_notes") == row.get("data_notes") else ""
        if row.get("status") == "corrupt":
            out.append(f"{row['cell_id']}: {row.get('reason') or notes}; not drawn")
        elif "left out" in notes:
            out.append(f"{row['cell_id']}: {notes}")
    return out


def _nothing_measured(runs: object, sweep: str) -> int:
    """1 with a message when no cell of the summary has a measurement (nothing to draw), else 0."""
    import pandas as pd

    assert isinstance(runs, pd.DataFrame)
    if "status" in runs and (runs["status"] == "ok").any():
        return 0
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    print(f"error: nothing to draw: no cell of sweep {sweep} has a measurement ("
          + (", ".join(f"{n} {s}" for s, n in counts.items()) or "no cells") + ")", file=sys.stderr)
    return 1


def _figure(args: argparse.Namespace) -> int:
    import pandas as pd

    from calorimeter.figures import render
    from calorimeter.plan.plan import plan_file
    from calorimeter.records.paths import SweepPaths

    plan = plan_file(args.sweep)
    out = SweepPaths.of(plan.results_dir, plan.sweep)
    summary = out.summary_parquet
    if not summary.is_file():
        raise ConfigError(f"{summary} does not exist yet: run `calorimeter aggregate {args.sweep}` (or snakemake "
                          "with this sweep) first")
    try:
        runs = pd.read_parquet(summary)
    except Exception as e:  # noqa: BLE001 - a damaged summary: say which file, never a traceback
        raise ConfigError(f"{summary} cannot be read ({type(e).__name__}); run `calorimeter aggregate "
                          f"{args.sweep}` again") from None
    for note in _damaged_notes(runs):
        print(f"note: damaged record: {note}", file=sys.stderr)
    if _nothing_measured(runs, plan.sweep):
        return 1
    res = render("throughput", {"runs": runs}, out.figure("throughput", "png"), out.figure("throughput", "pdf"))
    measured = int((runs["status"] == "ok").sum())
    print(f"{res.n_points} cells drawn ({measured} measured) -> {out.figure('throughput', 'png').parent}")
    return 0


def _status(args: argparse.Namespace) -> int:
    import time

    from calorimeter.operate.source import load_plan
    from calorimeter.operate.view import format_table, sweep_status, to_json
    from calorimeter.projection.cost import sweep_cost

    plan = load_plan(args.sweep, args.results_dir)
    states = _states(args.state)
    fmt = "json" if args.json else args.format
    cost = sweep_cost(plan)  # once: the projected wall times do not change while watching
    try:
        while True:
            st = sweep_status(plan, cost=cost)
            text = to_json(st) if fmt == "json" else format_table(st, states)
            if args.watch and fmt != "json":  # JSON views follow each other (one document each)
                print("\033[H\033[2J", end="")  # clear the terminal between views
            print(text, flush=True)
            if not args.watch:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:  # the way out of --watch
        return 0


def _states(text: str | None) -> set[str] | None:
    """``--state failed,running`` checked against the known states."""
    from calorimeter.operate.state import STATES
    from calorimeter.plan.config_errors import short, suggest

    if not text:
        return None
    states = {s.strip() for s in text.split(",") if s.strip()}
    for s in sorted(states):
        if s not in STATES:
            raise ConfigError(f"--state {short(s)}: not a cell state{suggest(s, list(STATES))} (states: "
                              f"{', '.join(STATES)})")
    return states


def _rerun(args: argparse.Namespace) -> int:
    from calorimeter.operate import rerun
    from calorimeter.operate.eta import n_cells
    from calorimeter.operate.source import load_plan
    from calorimeter.operate.view import cell_folders, sweep_status

    if Path(args.sweep).is_dir():
        raise ConfigError(f"{args.sweep} is a folder: rerun needs the sweep file (Snakemake runs it again)")
    if not (args.failed or args.oom or args.cells):
        raise ConfigError("say which cells to rerun: --failed, --oom and/or --cells GLOB")
    extra = list(args.passthrough)
    if args.results_dir:
        extra += ["--config", f"results_dir={args.results_dir}"]
    plan = load_plan(args.sweep, args.results_dir)
    st = sweep_status(plan)
    chosen = rerun.select(st.cells, args.failed, args.oom, tuple(args.cells or ()))
    if not chosen:
        print(f"nothing to rerun in sweep {plan.sweep}: no cell is "
              + " or ".join(w for w, on in (("failed", args.failed), ("oom", args.oom), ("matched", args.cells))
                            if on))
        return 0
    folders = dict(zip((cs.cell_id for cs in st.cells), cell_folders(plan), strict=True))
    why = " ".join(f"--{k} {v}" if v is not True else f"--{k}" for k, v in
                   (("failed", args.failed), ("oom", args.oom), ("cells", " ".join(args.cells or ()))) if v)
    commands = rerun.snakemake_commands(args.sweep, [str(folders[cs.cell_id].run_json) for cs in chosen], extra)
    print(f"rerun {n_cells(len(chosen))} of sweep {plan.sweep} ({why}):")
    for cs in chosen:
        print(f"  {cs.cell_id}  {cs.state}{f' ({cs.failure_class})' if cs.failure_class else ''}  "
              f"{cs.attempts} attempt{'' if cs.attempts == 1 else 's'} so far")
    if args.dry_run:
        print("dry run: nothing set aside; would run:\n" + "\n".join("  " + rerun.shell_line(c) for c in commands))
        return 0
    for cs in chosen:
        print("  set aside: " + rerun.set_aside(folders[cs.cell_id], why).describe())
    if args.no_run:
        print("records set aside; now run:\n" + "\n".join("  " + rerun.shell_line(c) for c in commands))
        return 0
    return rerun.run_commands(commands)


def _provenance_check(args: argparse.Namespace) -> int:
    from calorimeter.records import patches

    store, folders = Path(args.store or patches.PATCH_STORE), [Path(f) for f in args.folders]
    for f in folders:
        if not f.is_dir():
            raise ConfigError(f"{f} is not a folder")
    rows = patches.check(folders, store, rebuild_recipes=not args.quick)
    by_patch: dict[tuple[str, str], list[Path]] = {}
    sources = {}
    for r in rows:
        if r.patch is not None and r.resolution is not None:
            key = (r.patch.sha256, r.resolution.status)
            by_patch.setdefault(key, []).append(r.record)
            sources[key] = r.resolution.source + ("" if r.resolution.hash_checked else ", not rebuilt (--quick)")
    for (sha, status), records in sorted(by_patch.items()):
        print(f"{status:<13} {sha[:16]}  {len(records):>3} record(s)  {sources[sha, status]}"
              + ("" if status in (patches.OK, patches.UNRECOVERABLE) else f"  e.g. {records[0]}"))
    bad = patches.failures(rows)
    print(f"{len(rows)} records: " + "; ".join(f"{v} {k}" for k, v in patches.state_counts(rows).items())
          + f"; {len(by_patch)} distinct "
          f"patch(es) named, {len(bad)} record(s) whose patch is missing or wrong")
    if args.table:
        from calorimeter.records.atomic import write_atomic

        text = patches.table_markdown(rows, folders[0], patches.load_index(store))
        write_atomic(Path(args.table), lambda p: p.write_text(text))
        print(f"written {args.table}")
    return 1 if bad else 0


def _provenance_patch(args: argparse.Namespace) -> int:
    from calorimeter.records import patches
    from calorimeter.records.atomic import write_atomic
    from calorimeter.records.run_record import read_run_record

    path = Path(args.record)
    run_json = path / "run.json" if path.is_dir() else path
    if not run_json.is_file():
        raise ConfigError(f"{path}: no run.json there")
    ref = patches.patch_ref(run_json, read_run_record(run_json).data)
    if ref is None:
        raise ConfigError(f"{run_json} names no source patch (a clean tree, or measured before records kept one)")
    res = patches.resolve(ref, Path(args.store or patches.PATCH_STORE))
    if res.data is None:
        print(f"error: {res.status}: {res.source}", file=sys.stderr)
        return 1
    if args.out:
        data = res.data
        write_atomic(Path(args.out), lambda tmp: tmp.write_bytes(data))
    else:
        sys.stdout.buffer.write(res.data)
    print(f"{len(res.data)} bytes, SHA-256 {ref.sha256[:16]}… ({res.source}); the measured code: git checkout "
          f"{ref.commit} && git apply {args.out or '<this patch>'}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(prog="calorimeter", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("plan", help="expand a sweep file and print every cell with its status and projected wall "
                        "time, and the sweep's projected GPU-hours")
    sp.add_argument("sweep", help="sweep file, e.g. config/sweeps/h200-optimization.yaml")
    sp.add_argument("--format", choices=("table", "json"), default="table")
    sp.add_argument("--calibration", metavar="FOLDER", help="price the cells with the calibration.json and timing.json "
                    "of this folder (default: the committed set, results/reference/study-projected-*)")
    sp.set_defaults(func=_plan)
    sm = sub.add_parser("models", help="list the model catalogue and hardware profiles")
    sm.add_argument("sweep", nargs="?", help="also the models and hardware this sweep file defines")
    sm.set_defaults(func=_models)
    for name, func, helptext in (("aggregate", _aggregate, "write summary.parquet/.csv of a sweep"),
                                 ("figure", _figure, "draw the throughput figure of a sweep")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("sweep")
        s.set_defaults(func=func)
    st = sub.add_parser("status", help="where every cell of a sweep stands: state, job, attempts, progress, ETA "
                        "(from the result files and the scheduler; works while Snakemake runs and after it died)")
    st.add_argument("sweep", help="the sweep file, or its results folder (results/<sweep>, with plan.json)")
    st.add_argument("--format", choices=("table", "json"), default="table")
    st.add_argument("--json", action="store_true", help="the same as --format json")
    st.add_argument("--state", help="only cells in these states, comma-separated (e.g. failed,running)")
    st.add_argument("--watch", type=float, metavar="SECONDS", help="print the view again every SECONDS")
    st.add_argument("--results-dir", help="with a sweep file: its results are in this folder instead of its "
                    "results_dir (as snakemake --config results_dir=...)")
    st.set_defaults(func=_status)
    rr = sub.add_parser("rerun", help="rerun the failed, OOM or chosen cells of a sweep and nothing else (their "
                        "records are set aside into their attempt folder, never deleted)",
                        epilog="arguments after -- go to snakemake, e.g. calorimeter rerun config/sweeps/x.yaml "
                        "--failed -- --profile profiles/slurm")
    rr.add_argument("sweep")
    rr.add_argument("--failed", action="store_true", help="cells that failed (any class) or were interrupted")
    rr.add_argument("--oom", action="store_true", help="cells that ran out of memory")
    rr.add_argument("--cells", nargs="+", metavar="GLOB", help="cells whose id matches (fnmatch)")
    rr.add_argument("--dry-run", "-n", action="store_true", help="list what would be rerun; change nothing")
    rr.add_argument("--no-run", action="store_true", help="set the records aside and print the snakemake commands")
    rr.add_argument("--results-dir", help="the sweep's results are in this folder instead of its results_dir "
                    "(passed on to snakemake as --config results_dir=...)")
    rr.set_defaults(func=_rerun)
    sr = sub.add_parser("run-cell", help="run one planned cell (what the Snakemake train rule does)")
    sr.add_argument("sweep")
    sr.add_argument("cell", help="cell id (see `calorimeter plan`)")
    sr.set_defaults(func=_run_cell)
    pv = sub.add_parser("provenance", help="the code that measured each record: its commit and, from a modified "
                        "tree, its source patch, found and checked by SHA-256").add_subparsers(dest="action",
                                                                                            required=True)
    pc = pv.add_parser("check", help="check that every record's named patch is there with its hash (next to the "
                       "record, in the patch store, or rebuilt from history by a recipe) or listed as unrecoverable; "
                       "exit 1 otherwise")
    pc.add_argument("folders", nargs="*", default=["results/reference"], help="folders of records (default: "
                    "results/reference)")
    pc.add_argument("--table", metavar="FILE", help="also write the provenance table (Markdown) of the folders")
    pc.add_argument("--quick", action="store_true", help="accept a recipe without rebuilding it from history")
    pp = pv.add_parser("patch", help="write a record's source patch (to apply on its commit)")
    pp.add_argument("record", help="a cell folder or its run.json")
    pp.add_argument("-o", "--out", help="write to this file (default: standard output)")
    for q in (pc, pp):
        q.add_argument("--store", help="the patch store (default: results/reference/patches)")
    pc.set_defaults(func=_provenance_check)
    pp.set_defaults(func=_provenance_patch)
    from calorimeter.reproduce.cli import add_commands  # artifact evaluation: compare, export

    add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    args.passthrough = passthrough
    if passthrough and args.command != "rerun":
        parser.error("arguments after -- are for `calorimeter rerun` (passed to snakemake)")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (ConfigError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of stdout left (``calorimeter status | head``): no traceback, the shell's SIGPIPE status."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):
        # the interpreter flushes stdout once more at exit: point it at /dev/null first
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
