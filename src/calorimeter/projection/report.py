"""The validation's report: its summary as the generated tables of docs/projection.md, and its per-cell table written
as Parquet and CSV.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.projection.accuracy import RegimeCoverage
from calorimeter.projection.regimes import BASE_REGIMES
from calorimeter.projection.targets import COVERAGE
from calorimeter.records.atomic import write_atomic, write_parquet_atomic

#: the markers of the block of docs/projection.md that :func:`write_doc_block` generates (the docs' convention for
#: generated regions, as :mod:`calorimeter.analysis.findings_docs` writes them)
DOC_BEGIN = ("<!-- BEGIN GENERATED projection-validation: python bench/projection_validation.py --from-json "
             "<validation.json> --doc docs/projection.md; do not edit by hand -->")
DOC_END = "<!-- END GENERATED projection-validation -->"


def _p(x: Any, sign: bool = False) -> str:
    x = float(x) if x is not None else math.nan
    return "n/a" if x != x else (f"{x:+.1%}" if sign else f"{x:.1%}")


def summary_markdown(summary: dict[str, Any], source: str = "") -> str:
    """The validation summary (:func:`loco_summary` with ``bands``: :func:`band_summary`) as the tables of
    docs/projection.md: per current engine the held-out configurations' errors and targets; per regime the errors,
    bands and coverage of every engine's held-out and extrapolation rows; the band each regime gives a projected row
    and the spread between machines."""
    tm = "tokens_per_s_per_gpu"
    out = [f"Generated from `{source}`." if source else "", "",
           "Held-out configurations of the current engines (leave one configuration out; run = unit; stated "
           f"coverage {summary.get('coverage_stated', COVERAGE):.0%}):", "",
           "| engine | cells (folds) | tokens/s median / max / mean signed | energy/token | power | "
           "within band (tokens/s, energy, power) | targets met |", "|---|---|---|---|---|---|---|"]
    for key, g in summary.get("groups", {}).items():
        errs = [f"{_p(g[m]['median_abs'])} / {_p(g[m]['max_abs'])} / {_p(g[m]['mean_signed'], True)}"
                for m in (tm, "energy_per_token_j", "power_avg_w")]
        cov = ", ".join(_p(g[m].get("coverage")) for m in (tm, "energy_per_token_j", "power_avg_w"))
        met = ", ".join(k for k, v in g["targets_met"].items() if v)
        miss = ", ".join(k for k, v in g["targets_met"].items() if not v)
        out.append(f"| {key} | {g['cells']} ({g['folds']}) | {' | '.join(errs)} | {cov} | {met}"
                   + (f"; **not met: {miss}**" if miss else "") + " |")
    out += ["", "Per regime, every engine's held-out and extrapolation rows (a row counts in each regime it is in; "
            "base regimes: rows inside their calibration's range); within band: rows inside the band the other folds "
            "give them, with the 90% interval of that share (binomial):", "",
            "| regime | rows | engines | tokens/s median / max / mean signed | median band | within band (90%) | "
            "energy/token median / max | within band (90%) |", "|---|---|---|---|---|---|---|---|"]
    regimes = summary.get("regimes", {})
    for label, r in regimes.get(tm, {}).items():
        e = regimes.get("energy_per_token_j", {}).get(label, {})

        def cov(x: RegimeCoverage) -> str:
            if not x or not x.get("banded"):
                return "no band"
            lo, hi = x["coverage_90"]
            return (f"{x['covered']}/{x['banded']} ({lo:.0%}-{hi:.0%})" + ("" if x["met"] else " **not met**"))

        out.append(f"| {label} | {r['rows']} | {len(r['engines'])} | {_p(r['median_abs'])} / {_p(r['max_abs'])} / "
                   f"{_p(r['mean_signed'], True)} | +-{_p(r['band_median'])} | {cov(r)} | "
                   f"{_p(e.get('median_abs'))} / {_p(e.get('max_abs'))} | {cov(e)} |")
    for key, b in summary.get("bands", {}).items():
        out += ["", f"The band a projected row of `{key}` takes per regime (its calibration on every committed cell; "
                "an extrapolation's band grows with the doublings beyond the range over those measured):", "",
                "| regime | tokens/s | energy/token | power | measured on |", "|---|---|---|---|---|"]
        for label, r in b["regimes"].items():
            if not r["band"] and label not in BASE_REGIMES and r["reason"].startswith("0 held-out rows"):
                continue  # an extrapolation of a refused or never measured base regime: nothing to add
            if r["band"]:
                x = f", x{r['factor']:.3g} beyond" if r["factor"] == r["factor"] else ""
                out.append(f"| {label} | +-{_p(r['band'].get(tm))} | +-{_p(r['band'].get('energy_per_token_j'))} | "
                           f"+-{_p(r['band'].get('power_avg_w'))} | {r['rows']} rows"
                           f"{'' if r['pure'] else ' (also outside in other ways)'}{x}: "
                           f"{', '.join(r['sources'])} |")
            else:
                out.append(f"| {label} | refused | | | {r['reason']} |")
        for base, sp in b["machine_spread"].items():
            out.append(f"| spread between machines, {base} (the floor of its rows' bands) | +-{_p(sp.get(tm))} | "
                       f"+-{_p(sp.get('energy_per_token_j'))} | +-{_p(sp.get('power_avg_w'))} | configurations "
                       "measured on 2+ machines |")
    return "\n".join(out).strip() + "\n"


def write_doc_block(path: str | Path, summary: dict[str, Any], source: str = "") -> None:
    """Replace the generated block of a doc (between :data:`DOC_BEGIN` and :data:`DOC_END`) by
    :func:`summary_markdown`.

    Raises:
        ValueError: the doc has no such block.
    """
    path = Path(path)
    text = path.read_text()
    if DOC_BEGIN not in text or DOC_END not in text:
        raise ValueError(f"{path}: no generated block ({DOC_BEGIN!r} ... {DOC_END!r})")
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    new = f"{head}{DOC_BEGIN}\n{summary_markdown(summary, source)}{DOC_END}{tail}"
    write_atomic(path, lambda tmp: tmp.write_text(new))


def write_validation(table: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, table)
    write_atomic(out.with_suffix(".csv"), lambda tmp: table.to_csv(tmp, index=False))


__all__ = ["DOC_BEGIN", "DOC_END", "summary_markdown", "write_doc_block", "write_validation"]
