"""The study's findings checked on a sweep's tables: one row per finding with the study's statement and number,
this sweep's number with its 95% interval, and a verdict (agrees / disagrees / cannot say, with what is missing).

``evaluate(tables)`` builds the table; ``calorimeter.findings.report`` writes ``findings.csv`` and its HTML view.
The workflow's rule ``findings`` runs both on every sweep; the files are never edited by hand.
"""

from __future__ import annotations

import math

import pandas as pd

from calorimeter.findings.catalog import FINDINGS, Evidence, Finding, Tables
from calorimeter.findings.stats import CANNOT_SAY, Claim, Estimate, direction, verdict

#: the study's setting, for the ``setting`` column (shared notes, paper-findings.md section 2)
STUDY_SETTING = ("study: GPT3-175B, Llama3-70B, Mixtral-8x7B/8x22B on 32 H200 (4 nodes x 8) and 64 H100, GBS 128, "
                 "one profiled iteration after 10 warm-up steps")

COLUMNS = ("finding", "claim", "study_value", "provenance", "figure", "metric", "unit", "value", "ci95_low",
           "ci95_high", "n", "n_repeats", "interval", "direction", "verdict", "why", "needs", "scope", "configs",
           "detail", "setting")


def sweep_setting(runs: pd.DataFrame) -> str:
    """This sweep's models, hardware and node layouts, and run length, from its measured cells."""
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
        out += f", {int(steps.min())}-{int(steps.max())} measured steps"
    return out


def _needs(f: Finding, ev: Evidence, why: str, verdict_: str) -> str:
    if verdict_ != CANNOT_SAY:
        return ""
    if ev.estimate is None or not math.isfinite(ev.estimate.value):
        return "; ".join(x for x in (ev.missing, f"needs: {f.needs}" if f.needs else "") if x)
    if not ev.estimate.has_interval:
        return "repetitions (repeats >= 2) or more comparisons: a single measurement has no interval"
    return "more repetitions or comparisons to narrow the interval"


def cpu_only(runs: pd.DataFrame | None) -> bool:
    """Whether every measured cell ran on CPU ranks (no GPU telemetry to check most findings with)."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return False
    ok = runs[runs["status"] == "ok"]
    return not ok.empty and bool((ok["hardware"] == "cpu").all())


def magnitude_note(f: Finding, est: Estimate | None) -> str:
    """``; ...`` when the study states a number (``Finding.study_number``) that the whole 95% interval misses: the
    verdict is on the direction, this says whether the size matches."""
    if not math.isfinite(f.study_number) or est is None or not est.has_interval:
        return ""
    if est.low <= f.study_number <= est.high:
        return f"; the study's {f.study_number:.3g} {f.unit} lies within the interval"
    side = "above" if f.study_number > est.high else "below"
    return f"; the study's {f.study_number:.3g} {f.unit} lies {side} the whole interval: the size differs"


def evaluate_one(f: Finding, tables: Tables, setting: str = "") -> dict[str, object]:
    """One row of the findings table."""
    try:
        ev = f.check(tables)
    except Exception as e:  # a broken check must not hide the other findings; it says why
        ev = Evidence(missing=f"check failed: {type(e).__name__}: {e}")
    est = ev.estimate
    v, why = verdict(est, Claim(f.sign, f.threshold, f.tolerance))
    why += magnitude_note(f, est)
    return {
        "finding": f.id, "claim": f.claim, "study_value": f.study_value, "provenance": f.provenance,
        "figure": f.figure, "metric": f.metric, "unit": f.unit,
        "value": est.value if est else math.nan, "ci95_low": est.low if est else math.nan,
        "ci95_high": est.high if est else math.nan, "n": est.n if est else 0, "n_repeats": ev.n_repeats,
        "interval": est.method if est else "", "direction": direction(est, f.sign, f.threshold),
        "verdict": v, "why": (why if est is not None and math.isfinite(est.value) else (ev.missing or why))
        + (" (this sweep ran on CPU ranks: no GPU telemetry)" if v == CANNOT_SAY and cpu_only(tables.get("runs"))
           else ""),
        "needs": _needs(f, ev, why, v), "scope": ev.scope, "configs": "; ".join(ev.configs), "detail": ev.detail,
        "setting": f"{setting}; {STUDY_SETTING}" if setting else STUDY_SETTING,
    }  # fmt: skip


def evaluate(tables: Tables) -> pd.DataFrame:
    """The findings table of a sweep: ``tables`` holds ``runs`` (and ``gpus``, ``kernels`` where measured, and
    ``compare``: the runs tables of the sweeps named for cross-sweep findings)."""
    setting = sweep_setting(tables.get("runs"))
    return pd.DataFrame([evaluate_one(f, tables, setting) for f in FINDINGS], columns=list(COLUMNS))


__all__ = ["COLUMNS", "FINDINGS", "evaluate", "evaluate_one", "sweep_setting"]
