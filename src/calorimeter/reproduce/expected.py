"""The numbers a document states about the committed sets, computed from their tables, so that a document cannot drift
from the data it describes.

A spec file (``docs/expected.yaml``) names each value and how it is made; the document carries each between markers,
``<!-- expected NAME -->text<!-- /expected -->`` (inline, or around a whole table). ``--write`` puts the computed text
between the markers, ``--check`` exits 1 naming every marker whose text differs (tests/test_docs_run.py runs it).

Kinds of values (keys of a spec entry):

* ``sweep`` (under ``results/reference``), ``table`` (``runs``, the default, or ``kernels``: each kernel row gets its
  cell's runs parameters), ``where`` (``column: value``, every one must hold), optional ``by`` (one value per
  distinct value of that column, in sorted order or the spec's ``order``, joined with ``join``, default ``/``),
  optional ``figure`` (a figure's name: only the cells that figure draws, their ``efficiency_norm`` normalised as
  the figure normalises it, by the best configuration it draws) and ``format``: a Python format string over the
  means of the selected rows' numeric columns; optional ``ratio_to`` (``where``, and ``column``, default
  ``tokens_per_s_per_gpu``; ``sweep``, default the value's): adds ``ratio``, each row's ``column`` over the mean of
  the rows it selects (a same-run ratio such as a layout's tokens/s per GPU over the run's ZeRO-1 cell).
* ``size``: a folder; ``format`` over ``mb`` (the git-tracked files' size in MB, rounded to ``round`` digits as
  Python's ``round``).
* The ``sets`` list: the table of committed sets, one row per sweep with its hand-written facts (``config`` and an
  optional ``config_note``, ``hardware``, ``time``, an optional ``note``); the cells, repetitions and ranges of
  tokens/s per GPU, average power, energy per token and peak GPU temperature come from its runs table (ok cells that
  trained: those with a throughput).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from calorimeter.analysis.tables import add_normalized_efficiency
from calorimeter.figures.selection import figure_cells
from calorimeter.records.atomic import write_atomic
from calorimeter.records.legacy import config_ids, upgrade_runs

MARKER = re.compile(r"<!-- expected (\S+) -->(.*?)<!-- /expected -->", re.DOTALL)
REFERENCE = Path("results") / "reference"
#: the columns of the sets table: header, runs column, format of one bound
RANGES = (("tokens/s/GPU", "tokens_per_s_per_gpu", "{:,.0f}"), ("power (W)", "power_avg_w", "{:.0f}"),
          ("J/token", "energy_per_token_j", "{:.4f}"), ("peak °C", "temp_peak_c", "{:.0f}"))


def _runs(root: Path, sweep: str) -> pd.DataFrame:
    return upgrade_runs(pd.read_parquet(root / REFERENCE / sweep / "tables" / "runs.parquet"))


def _rows(root: Path, spec: dict) -> pd.DataFrame:
    runs = _runs(root, spec["sweep"])
    if spec.get("figure"):
        drawn = set(figure_cells(spec["figure"], runs.to_dict("records")))
        runs = add_normalized_efficiency(runs[runs["cell_id"].isin(drawn)])
    df = runs
    if spec.get("table", "runs") == "kernels":
        kern = pd.read_parquet(root / REFERENCE / spec["sweep"] / "tables" / "kernels.parquet")
        df = kern.merge(runs.drop(columns=[c for c in runs.columns if c in kern.columns and c != "cell_id"]),
                        on="cell_id", how="left")
    df = _select(df, spec["sweep"], spec.get("where"))
    if spec.get("ratio_to"):
        ref = spec["ratio_to"]
        col, sweep = ref.get("column", "tokens_per_s_per_gpu"), ref.get("sweep", spec["sweep"])
        base = _select(_runs(root, sweep), sweep, ref["where"])
        df = df.assign(ratio=pd.to_numeric(df[col], errors="coerce") / pd.to_numeric(base[col]).mean())
    return df


def _select(df: pd.DataFrame, sweep: str, where: dict | None) -> pd.DataFrame:
    """The rows where every ``column: value`` of ``where`` holds; a column absent or no row left is an error."""
    for col, want in (where or {}).items():
        if col not in df.columns:
            raise KeyError(f"{sweep}: no column {col!r} to select on")
        df = df[df[col] == want]
    if df.empty:
        raise ValueError(f"{sweep}: no row where {where}")
    return df


def value(root: Path, spec: dict) -> str:
    """One value's text."""
    if "size" in spec:
        return spec["format"].format(mb=round(tracked_bytes(root, spec["size"]) / 1e6, spec.get("round", 0)))
    df = _rows(root, spec)
    if spec.get("by"):
        by = dict(list(df.groupby(spec["by"], sort=True)))
        groups = [by[k] for k in spec.get("order") or by]
    else:
        groups = [df]
    return spec.get("join", "/").join(spec["format"].format(**g.mean(numeric_only=True).to_dict()) for g in groups)


def tracked_bytes(root: Path, folder: str) -> int:
    """Bytes of the git-tracked files under ``folder`` (every file where ``root`` is not a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=root, capture_output=True, check=True)
        files = [root / f for f in out.stdout.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in (root / folder).rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files if p.is_file())


def _span(series: pd.Series, fmt: str) -> str:
    v = pd.to_numeric(series, errors="coerce").dropna()
    if v.empty:
        return ""
    lo, hi = fmt.format(v.min()), fmt.format(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


def set_row(root: Path, entry: dict) -> str:
    """One row of the sets table."""
    runs = _runs(root, entry["sweep"])
    ran = runs[runs["status"].isin(["ok", "oom", "failed"])]
    ok = ran[ran["status"] == "ok"]
    trained = ok[pd.to_numeric(ok["tokens_per_s_per_gpu"], errors="coerce").notna()] if "tokens_per_s_per_gpu" in \
        ok.columns else ok.iloc[:0]
    reps = ok.groupby(config_ids(ok)).size() if len(ok) else pd.Series(dtype=int)
    cells = str(len(ran)) if len(ran) == len(runs) else f"{len(ran)} of {len(runs)}"
    notes = [_span(reps, "{:d}") or "0"]
    notes += [f"{n} {s}" for s, n in ran[ran["status"] != "ok"]["status"].value_counts().sort_index().items()]
    if entry.get("note"):
        notes.append(str(entry["note"]))
    config = f"`{entry['config']}`" + (f" {entry['config_note']}" if entry.get("config_note") else "")
    cols = [f"`{entry['sweep']}`", config, entry["hardware"], f"{cells} ({'; '.join(notes)})", str(entry["time"]),
            *(_span(trained[c], f) if c in trained.columns else "" for _, c, f in RANGES)]
    return "| " + " | ".join(cols) + " |"


def sets_table(root: Path, entries: list[dict]) -> str:
    """The sets table, with its header."""
    head = ["set (`results/reference/...`)", "config (`config/reference/...`)", "hardware", "cells (repetitions)",
            "GPU node time", *(h for h, _, _ in RANGES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *(set_row(root, e) for e in entries)]
    return "\n" + "\n".join(lines) + "\n"


def render(root: Path, spec: dict[str, Any]) -> dict[str, str]:
    """Every named text of the spec."""
    out = {name: value(root, v) for name, v in (spec.get("values") or {}).items()}
    if spec.get("sets"):
        out["sets"] = sets_table(root, spec["sets"])
    return out


def drift(doc: str, texts: dict[str, str]) -> list[str]:
    """A line per marker whose text is not the computed one (or that names no value)."""
    out = []
    for m in MARKER.finditer(doc):
        name, text = m.group(1), m.group(2)
        if name not in texts:
            out.append(f"{name}: no such value in the spec")
        elif text != texts[name]:
            out.append(f"{name}: the document says {text.strip()!r}, the tables give {texts[name].strip()!r}")
    missing = sorted(set(texts) - {m.group(1) for m in MARKER.finditer(doc)})
    out += [f"{name}: computed but not in the document" for name in missing]
    return out


def apply(doc: str, texts: dict[str, str]) -> str:
    """The document with every marker's text replaced by the computed one."""
    return MARKER.sub(lambda m: f"<!-- expected {m.group(1)} -->{texts.get(m.group(1), m.group(2))}<!-- /expected -->",
                      doc)


def main(argv: list[str] | None = None) -> int:
    """``python -m calorimeter.reproduce.expected [--write] DOC [--spec SPEC]``: check (or write) the values DOC states
    about the committed sets; exit 1 naming each that drifted."""
    ap = argparse.ArgumentParser(prog="python -m calorimeter.reproduce.expected", description=main.__doc__)
    ap.add_argument("doc", type=Path, help="the document, e.g. docs/artifact.md")
    ap.add_argument("--spec", type=Path, help="the values' spec (default: expected.yaml next to DOC)")
    ap.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: the current folder)")
    ap.add_argument("--write", action="store_true", help="write the computed values into DOC")
    args = ap.parse_args(argv)
    spec = yaml.safe_load((args.spec or args.doc.with_name("expected.yaml")).read_text())
    texts = render(args.root, spec)
    doc = args.doc.read_text()
    if args.write:
        new = apply(doc, texts)
        write_atomic(args.doc, lambda tmp: tmp.write_text(new))
        print(f"written {len(texts)} values into {args.doc}")
        return 0
    problems = drift(doc, texts)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{args.doc}: {len(problems)} of {len(MARKER.findall(doc))} marked values differ from the tables")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
