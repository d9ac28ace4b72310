"""Write the findings table: ``findings.csv`` (every column) and ``findings.html`` (the HTML report's view:
statement, numbers, verdict, what is missing)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from calorimeter.findings.stats import AGREES, CANNOT_SAY, DISAGREES, PARTLY, VERDICTS
from calorimeter.records.atomic import write_atomic

VERDICT_COLORS = {AGREES: "#d9f2d9", PARTLY: "#fff3cd", DISAGREES: "#f8d7da", CANNOT_SAY: "#eeeeee"}


def fmt_number(v: object) -> str:
    """3 significant digits; empty for NaN."""
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return "" if not math.isfinite(x) else f"{x:.3g}"


def fmt_estimate(row: pd.Series) -> str:
    """``value [low, high] unit`` (``value unit (no interval)`` without bounds, empty without a value)."""
    v = fmt_number(row["value"])
    if not v:
        return ""
    lo, hi = fmt_number(row["ci95_low"]), fmt_number(row["ci95_high"])
    ci = f" [{lo}, {hi}]" if lo and hi else " (no interval)"
    return f"{v}{ci} {row['unit']}".strip()


def _text(row: pd.Series, col: str) -> str:
    v = row.get(col, "")
    return "" if v is None or (isinstance(v, float) and v != v) else str(v)


def _undecided(row: pd.Series) -> str:
    u = _text(row, "undecided")
    return f" ({u})" if u else ""


def _units(row: pd.Series) -> str:
    """Degrees of freedom in repetitions and in machines, where the table has them."""
    if "n_machines" not in row or not row.get("dof"):
        return f"{fmt_number(row.get('dof'))} dof"
    return (f"{fmt_number(row['dof'])} dof ({_text(row, 'experimental_unit')}); "
            f"{fmt_number(row.get('dof_repetitions'))} dof over repetitions, {int(row['n_machines'])} machine(s)")


def to_html(df: pd.DataFrame, title: str) -> str:
    """A self-contained HTML page: one row per finding, coloured by verdict."""
    counts = df["verdict"].value_counts()
    head = ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
    rows = []
    for _, r in df.iterrows():
        e = html.escape
        rows.append(
            f'<tr style="background:{VERDICT_COLORS.get(r["verdict"], "#fff")}">'
            f"<td><b>{e(r['finding'])}</b><br>{e(r['figure'])}</td>"
            f"<td>{e(r['claim'])}<br><i>{e(r['study_value'])}</i> {e(r['provenance'])}"
            f"<br><small>&ldquo;{e(_text(r, 'study_wording'))}&rdquo; ({e(_text(r, 'source'))})</small></td>"
            f"<td>{e(r['metric'])}<br><small>definition: {e(_text(r, 'definition'))}</small></td>"
            f"<td>{e(fmt_estimate(r))}<br><small>{e(str(r['interval']))}; {e(_units(r))}; "
            f"repeats &ge; {int(r['n_repeats'])}; {e(str(r.get('preconditions', '')))}</small></td>"
            f"<td><b>{e(r['verdict'])}</b>{e(_undecided(r))}<br><small>{e(str(r['why']))}</small></td>"
            f"<td><small>{e(str(r['needs']))}</small></td>"
            f"<td><small>{e(str(r['scope']))}<br>{e(str(r['detail']))}</small></td></tr>")
    setting = html.escape(str(df["setting"].iloc[0])) if len(df) else ""
    version = str(df["catalog_version"].iloc[0]) if len(df) and "catalog_version" in df.columns else "1"
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title>"
        "<style>body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
        "td,th{border:1px solid #bbb;padding:4px;vertical-align:top}th{background:#ddd}</style></head><body>"
        f"<h2>{html.escape(title)}</h2><p>{head}. {setting}.</p>"
        "<p>Verdict (catalogue version " + html.escape(version) + "): <b>agrees</b> when this sweep's whole 95% "
        "interval lies beyond the finding's tolerance on the study's side and, for a claim with a size, inside "
        "that size; <b>partly</b> when the direction holds and the interval lies wholly outside the size; "
        "<b>disagrees</b> when the whole interval lies short of the tolerance (the other side, or no effect of the "
        "claimed kind); <b>cannot say</b> otherwise: an interval across the direction's or the size's edge, a "
        "size that cannot occur in this regime, too few degrees of freedom, or no cell meeting the preconditions "
        "(the last column says what is missing). Intervals: Student t over repetitions on one machine (cells are "
        "paired only within a machine), or over machines for claims about machines, at least 2 degrees of "
        "freedom; only cells that meet the finding's preconditions (steady windows, below or at the power cap, "
        "GPU-bound, the claim's regime) are compared.</p>"
        "<table><tr><th>finding</th><th>study (statement, number, source)</th><th>this sweep measures</th>"
        "<th>this sweep (95% interval)</th><th>verdict</th><th>what is missing</th><th>evidence</th></tr>"
        + "".join(rows) + "</table></body></html>\n"
    )


def write_findings(df: pd.DataFrame, csv_path: str | Path, html_path: str | Path | None = None,
                   title: str = "Findings") -> None:
    """Write the CSV (and HTML) atomically."""
    write_atomic(Path(csv_path), lambda p: df.to_csv(p, index=False))
    if html_path is not None:
        text = to_html(df, title)
        write_atomic(Path(html_path), lambda p: Path(p).write_text(text))
