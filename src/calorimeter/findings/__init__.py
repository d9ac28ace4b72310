"""The study's findings checked on a sweep's tables: one row per finding with the study's statement and number (and
its registered wording, source and definition), this sweep's number with its 95% interval, degrees of freedom in
repetitions and in machines and the experimental unit, and a verdict (agrees / partly / disagrees / cannot say, with
what left it undecided, the reason and what measurement would answer).

``evaluate(tables)`` builds the table; ``calorimeter.findings.report`` writes ``findings.csv`` and its HTML view.
The workflow's rule ``findings`` runs both on every sweep; the files are never edited by hand. Every row records
the catalogue version (:data:`~calorimeter.findings.catalog.CATALOG_VERSION`) that judged it.
"""

from __future__ import annotations

import math

import pandas as pd

from calorimeter.findings.catalog import CATALOG_VERSION, FINDINGS, Evidence, Finding, Tables
from calorimeter.findings.preconditions import screen
from calorimeter.findings.stats import CANNOT_SAY, Effect, direction, verdict
from calorimeter.records.legacy import add_machines, config_ids
from calorimeter.records.machines import machine_label

#: the study's setting, for the ``setting`` column (shared notes, paper-findings.md section 2)
STUDY_SETTING = ("study: GPT3-175B, Llama3-70B, Mixtral-8x7B/8x22B on 32 H200 (4 nodes x 8) and 64 H100, GBS 128, "
                 "one profiled iteration after 10 warm-up steps")

COLUMNS = ("finding", "claim", "study_value", "provenance", "figure", "metric", "unit", "value", "ci95_low",
           "ci95_high", "n", "n_repeats", "interval", "direction", "verdict", "why", "needs", "scope", "configs",
           "detail", "setting", "dof", "experimental_unit", "preconditions", "catalog_version",
           # catalogue v5: what left a verdict undecided, the unit counts in both units, the registered definition
           "undecided", "scale", "dof_repetitions", "n_machines", "dof_machines", "machines", "study_wording",
           "source", "definition", "secondary")


def sweep_setting(runs: pd.DataFrame) -> str:
    """This sweep's models, hardware and node layouts, run length and warm-up, from its measured cells."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return "this sweep: no cells"
    ok = runs[runs["status"] == "ok"]
    if ok.empty:
        return "this sweep: no measured cell"
    lay = sorted({f"{h} {int(n)}x{int(g)}" for h, n, g in zip(ok["hardware"], ok["nodes"], ok["gpus_per_node"],
                                                                strict=True)})
    steps = pd.to_numeric(ok.get("measured_steps"), errors="coerce")
    seqs = sorted({int(s) for s in pd.to_numeric(ok["seq_len"], errors="coerce").dropna()})
    out = (f"this sweep: {', '.join(dict.fromkeys(ok['model']))} on {', '.join(lay)}, sequence "
           f"{'/'.join(map(str, seqs))}")
    if steps.notna().any():
        lo, hi = int(steps.min()), int(steps.max())
        out += f", {lo}-{hi} measured steps" if lo != hi else f", {lo} measured steps"
    if "warmup_reason" in ok.columns:
        n_steady = int(ok["warmup_reason"].astype(str).eq("steady").sum())
        out += f", {n_steady} of {len(ok)} cells with a steady measured window"
    return out


def _needs(f: Finding, ev: Evidence, verdict_: str, undecided: str) -> str:
    if verdict_ != CANNOT_SAY:
        return ""
    est = ev.estimate
    if est is None or not math.isfinite(est.value) or not f.measurable or undecided == "regime":
        return f.needs
    more = "machines (cells of one machine are not machines)" if est.unit == "machines" else "repetitions"
    if not est.has_interval or est.dof < 2:
        return f"more {more} (>= 3, interleaved); {f.needs}"
    return f"more {more} to narrow the interval; {f.needs}"


def _size_regime(f: Finding, ev: Evidence, runs: pd.DataFrame | None) -> str:
    """Why the claim's stated size cannot occur in the compared cells ("" when it can, or the claim has none)."""
    if f.rule.size is None or f.size_regime is None or runs is None or runs.empty or not ev.configs:
        return ""
    cells = runs[config_ids(runs).isin(ev.configs)]
    _, note = screen(cells, f.size_regime)
    return f.size_regime_why if note else ""


def cpu_only(runs: pd.DataFrame | None) -> bool:
    """Whether every measured cell ran on CPU ranks (no GPU telemetry to check most findings with)."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return False
    ok = runs[runs["status"] == "ok"]
    return not ok.empty and bool((ok["hardware"] == "cpu").all())


def evaluate_one(f: Finding, tables: Tables, setting: str = "") -> dict[str, object]:
    """One row of the findings table."""
    try:
        ev = f.check(tables)
    except Exception as e:  # a broken check must not hide the other findings; it says why
        ev = Evidence(missing=f"check failed: {type(e).__name__}: {e}")
    est: Effect | None = ev.estimate
    has = est is not None and math.isfinite(est.value)
    v, why, undecided = verdict(est, f.rule, regime=_size_regime(f, ev, tables.get("runs")) if has else "")
    if not has:
        why = ev.missing or why
        undecided = "precondition" if ev.precondition_failed else "data"
    if v == CANNOT_SAY and (tables["_cpu_only"] if "_cpu_only" in tables else cpu_only(tables.get("runs"))):
        why += " (this sweep ran on CPU ranks: no GPU telemetry)"
    d = f.definition
    machines = [m for m in ev.machines if m]
    units = ev.repetitions or (est.n if est else 0)
    return {
        "finding": f.id, "claim": f.claim, "study_value": f.study_value, "provenance": f.provenance,
        "figure": f.figure, "metric": f.metric, "unit": f.unit,
        "value": est.value if est else math.nan, "ci95_low": est.low if est else math.nan,
        "ci95_high": est.high if est else math.nan, "n": est.n if est else 0, "n_repeats": ev.n_repeats,
        "interval": est.method if est else "", "direction": direction(est, f.rule.sign, f.rule.null),
        "verdict": v, "why": why, "needs": _needs(f, ev, v, undecided), "scope": ev.scope,
        "configs": "; ".join(ev.configs),
        "detail": ev.detail, "setting": f"{setting}; {STUDY_SETTING}" if setting else STUDY_SETTING,
        "dof": est.dof if est else 0.0, "experimental_unit": est.unit if est else "",
        "preconditions": "; ".join(p.name for p in f.preconditions), "catalog_version": CATALOG_VERSION,
        "undecided": undecided, "scale": est.scale if est else "",
        "dof_repetitions": float(max(units - 1, 0)), "n_machines": len(machines),
        "dof_machines": float(max(len(machines) - 1, 0)),
        "machines": "; ".join(machine_label(m) if m.startswith("GPU-") else m for m in machines),
        "study_wording": d.wording, "source": d.source, "definition": d.definition, "secondary": d.secondary,
    }  # fmt: skip


def evaluate(tables: Tables) -> pd.DataFrame:
    """The findings table of a sweep: ``tables`` holds ``runs`` (and ``gpus``, ``kernels`` where measured, and
    ``compare``: the runs tables of the sweeps named for cross-sweep findings)."""
    tables = dict(tables)
    if tables.get("runs") is not None:  # tables without a machine column get it from the GPUs' UUIDs
        tables["runs"] = add_machines(tables["runs"], tables.get("gpus"))
    tables["_cpu_only"] = cpu_only(tables.get("runs"))  # type: ignore[assignment]
    setting = sweep_setting(tables.get("runs"))
    return pd.DataFrame([evaluate_one(f, tables, setting) for f in FINDINGS], columns=list(COLUMNS))


__all__ = ["CATALOG_VERSION", "COLUMNS", "FINDINGS", "evaluate", "evaluate_one", "sweep_setting"]
