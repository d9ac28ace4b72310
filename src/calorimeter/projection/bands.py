"""The bands: from a validation table's held-out rows, the band each regime takes (the stated-coverage quantile of the
absolute errors of rows in that regime), the spread between machines, the cross-fingerprint error; each banded row's
own band from the other folds' rows (whether it lies within it: the coverage check is on held-out cells); and the
bands stored in the calibrations a projection uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd

from calorimeter.projection.calibration import Calibration
from calorimeter.projection.regimes import (
    BASE_REGIMES,
    BEYOND_COLUMNS,
    EXTRAPOLATIONS,
    GPU_BOUND,
    HOST_BOUND,
    MIN_REGIME_ROWS,
    MOE,
    MOE_UNSEEN,
    RegimeBand,
    RegimeBandDict,
    band_key,
    choose_band,
    engine_own,
    regime_from_columns,
)
from calorimeter.projection.targets import BANDING, COVERAGE, HELD_OUT, METRICS, design_of, row_regimes

#: the fewest held-out cells of a dense base regime (GPU-bound or host-bound, as projected) its own band is built from
#: (fewer: pooled, :func:`regime_bands`)
BAND_MIN_CELLS = 10


@dataclass
class BandRows:
    """The banded rows of a validation table (``design`` in :data:`BANDING`, ``relation = match``) as arrays, with
    what :func:`regime_bands` reads: engine, design, fold, configuration, base regime, whether in range, per
    extrapolation whether the row lies outside the range in that way (``has``) and in that way alone (``pure``),
    the absolute errors per metric, how far beyond the range per extrapolation."""

    index: pd.Index
    cols: dict[str, np.ndarray]
    has: dict[str, np.ndarray]
    pure: dict[str, np.ndarray]
    errs: dict[str, np.ndarray]
    beyond: dict[str, np.ndarray]

    @classmethod
    def of(cls, table: pd.DataFrame) -> BandRows:
        """From a validation table."""
        t = table[table["relation"].eq("match") & design_of(table).isin(BANDING)]
        regimes = list(row_regimes(t))
        extra = [tuple(r[1:]) for r in regimes]
        design = design_of(t).to_numpy(dtype=object)
        conf = t["configuration"] if "configuration" in t else t["cell_id"]
        engine = (t["hardware"].astype(str) + "/" + t["fingerprint"].astype(str)).to_numpy(dtype=object)
        cols = {"hardware": t["hardware"].to_numpy(dtype=object),
                "fingerprint": t["fingerprint"].to_numpy(dtype=object), "design": design,
                "fold": t["fold"].to_numpy(dtype=object), "configuration": conf.to_numpy(dtype=object),
                "base": np.array([r[0] for r in regimes], dtype=object),
                "in_range": np.array([not e for e in extra], dtype=bool), "source": engine + " " + design}
        return cls(t.index, cols, {x: np.array([x in e for e in extra], dtype=bool) for x in EXTRAPOLATIONS},
                   {x: np.array([e == (x,) for e in extra], dtype=bool) for x in EXTRAPOLATIONS},
                   {m: t[f"{m}_rel_error"].abs().to_numpy(dtype=float) for m in METRICS},
                   {c: t[c].to_numpy(dtype=float) for c in BEYOND_COLUMNS.values() if c in t})


def _regime_band(rows: BandRows, sel: np.ndarray, coverage: float, min_rows: int, label: str, pure: bool = True
                 ) -> RegimeBand:
    """One regime's band from the selected rows: per metric the ``coverage`` quantile of their absolute errors (a
    metric with fewer than ``min_rows`` errors: none); with fewer rows than that: no band, and why."""
    n = int(sel.sum())
    srcs = sorted(set(rows.cols["source"][sel]))
    if n < min_rows:
        return RegimeBand(rows=n, sources=srcs, reason=f"{n} held-out rows measured in this regime (fewer than "
                                                       f"{min_rows})")
    band = {}
    for m in METRICS:
        e = rows.errs[m][sel]
        e = e[np.isfinite(e)]
        if len(e) >= min_rows:
            band[m] = float(np.quantile(e, coverage))
    col = BEYOND_COLUMNS.get(label)
    f = rows.beyond[col][sel] if col in rows.beyond else np.array([])
    f = f[f > 1.0]
    return RegimeBand(band, n, float(np.median(f)) if len(f) else math.nan, srcs, pure=pure)


def regime_bands(table: pd.DataFrame, hw: str, fp: str, coverage: float = COVERAGE, keep: np.ndarray | None = None,
                 rows: BandRows | None = None, moe_reason: str | None = None) -> dict[str, RegimeBand]:
    """The band of every regime (:func:`~calorimeter.projection.regimes.band_key`) for a calibration of
    ``hw``/``fp``, from the table's banded rows (``rows``: :class:`BandRows` of the table, when already built;
    ``keep``: only these of them; ``moe_reason``: :func:`moe_unseen_reason`, when already built).

    The base regimes from this engine's held-out configurations inside their calibration's range: dense host-bound
    with the other GPU types' host-bound rows while it has fewer than :data:`BAND_MIN_CELLS` (host times are fitted
    over GPU types that ran the same software), a dense regime with still fewer from every in-range dense row of this
    engine; MoE from this engine's MoE rows alone (:data:`MIN_REGIME_ROWS`, else refused). An extrapolation within a
    base regime from the rows of that base regime outside the range in that way alone (``pure``), else in that way
    among others: this engine's where it has :data:`MIN_REGIME_ROWS`, else every engine's and GPU type's (they
    measure the model's structure; MoE's only this engine's: :func:`~calorimeter.projection.regimes.engine_own`); a
    dense one with too few such rows from both dense bases together. ``MoE never calibrated`` is always refused, with
    what was measured (:func:`moe_unseen_reason`)."""
    rows = rows if rows is not None else BandRows.of(table)
    c = rows.cols
    keep = keep if keep is not None else np.ones(len(rows.index), dtype=bool)
    base, in_range = c["base"], c["in_range"] & keep
    own = keep & (c["hardware"] == hw) & (c["fingerprint"] == fp)
    held = np.isin(c["design"], HELD_OUT)
    dense = base != MOE
    out: dict[str, RegimeBand] = {}
    for b in BASE_REGIMES:
        sel = own & held & in_range & (base == b)
        if b == HOST_BOUND and sel.sum() < BAND_MIN_CELLS:
            sel = sel | (held & in_range & (base == b) & (c["hardware"] != hw))
        if b != MOE and sel.sum() < BAND_MIN_CELLS:
            sel = own & held & in_range & dense
        out[b] = _regime_band(rows, sel, coverage, BAND_MIN_CELLS if b != MOE else MIN_REGIME_ROWS, b)
        scopes = [own] if engine_own(b) else [own, keep]
        for x in EXTRAPOLATIONS:
            tries = [(scope & (base == b) & which, i == 0) for scope in scopes
                     for i, which in enumerate((rows.pure[x], rows.has[x]))]
            if b != MOE:
                tries += [(keep & dense & which, i == 0) for i, which in enumerate((rows.pure[x], rows.has[x]))]
            for sel_x, is_pure in tries:
                rb = _regime_band(rows, sel_x, coverage, MIN_REGIME_ROWS, x, pure=is_pure)
                if rb.band:
                    break
            out[band_key(b, x)] = rb
    out[MOE_UNSEEN] = RegimeBand(reason=moe_reason if moe_reason is not None else
                                 moe_unseen_reason(table, f"{hw}/{fp}", coverage))
    return out


def moe_unseen_reason(table: pd.DataFrame, key: str, coverage: float = COVERAGE) -> str:
    """Why a MoE row of a calibration without MoE cells is refused, with what was measured: the errors of every
    engine's calibration without its MoE cells on them (``moe-from-dense``) and of calibration ``key`` on another
    engine's MoE cells (``cross-moe``), tokens/s."""
    parts = ["no MoE cell of this engine in the calibration, and MoE's cost is the engine's own (routing, dispatch, "
             "expert loop, gradient path): an error measured on another engine's MoE cells bounds none of its rows"]
    d = design_of(table)
    for rows, what in ((table[d == "moe-from-dense"], "a calibration of that engine without its MoE cells"),
                       (table[(d == "cross-moe") & (table["calibration"] == key)] if "calibration" in table
                        else table.iloc[:0], "this calibration")):
        e = rows["tokens_per_s_per_gpu_rel_error"].dropna()
        if len(e):
            engines = ", ".join(sorted({f"{h}/{f}" for h, f in zip(rows["hardware"], rows["fingerprint"],
                                                                     strict=True)}))
            parts.append(f"on the {len(e)} MoE cells of {engines}, {what} erred {e.min():+.0%} to {e.max():+.0%} "
                         f"in tokens/s ({coverage:.0%} of |error| within {np.quantile(e.abs(), coverage):.0%})")
    return "; ".join(parts) + "; measure a MoE calibration set of this engine"


def machine_floor(table: pd.DataFrame, hw: str, fp: str, coverage: float = COVERAGE) -> dict[str, dict[str, float]]:
    """Per base regime and metric, the spread between machines a projection that cannot tell them apart carries:
    the ``coverage`` quantile of each machine's mean (over its repetitions) relative to the geometric mean of the
    machines', over every configuration of this engine measured on two or more machines (told apart by their GPUs'
    UUIDs: the runs' ``machine``); a regime with fewer than 3 such configurations pools every engine's."""
    sel = table["relation"].eq("match") & design_of(table).isin(HELD_OUT) & table["machine"].fillna("").ne("")
    t = table[sel]
    base = row_regimes(t).str[0]
    out: dict[str, dict[str, float]] = {}
    for b in BASE_REGIMES:
        own = t[(base == b) & (t["hardware"] == hw) & (t["fingerprint"] == fp)]
        devs, configs = _machine_devs(own)
        if configs < 3:
            devs, configs = _machine_devs(t[base == b])
        if configs >= 3:
            out[b] = {m: float(np.quantile(v, coverage)) for m, v in devs.items() if v}
    return out


def _machine_devs(t: pd.DataFrame) -> tuple[dict[str, list[float]], int]:
    """Per metric, each machine's mean over the machines' geometric mean minus 1, absolute, over the configurations
    measured on two or more machines; and how many there are."""
    devs: dict[str, list[float]] = {m: [] for m in METRICS}
    n = 0
    for _, c in t.groupby(["hardware", "fingerprint", "configuration"]):
        if c["machine"].nunique() < 2:
            continue
        n += 1
        for m in METRICS:
            means = c.groupby("machine")[f"{m}_measured"].mean().dropna()
            means = means[means > 0]
            if len(means) >= 2:
                devs[m].extend(np.abs(means / np.exp(np.log(means).mean()) - 1.0))
    return devs, n


def add_bands(table: pd.DataFrame, coverage: float = COVERAGE) -> pd.DataFrame:
    """Each banded row's band per metric (``design`` in :data:`BANDING`, ``relation = match``), as a projected row
    takes it (:func:`~calorimeter.projection.regimes.choose_band`: the widest band of its regimes, at least its base
    regime's machine spread), the bands made of the other rows (:func:`regime_bands` without the row's fold and
    without its configuration, of its engine, anywhere); whether the row lies within it (``<metric>_covered``; NA
    where the row's regime is refused or the metric has no band); ``band_basis``: the regime that set the tokens/s
    band, or why the row would be refused."""
    table = table.copy()
    for col, default in (("design", "loco"), ("configuration", None), ("machine", "")):
        if col not in table:
            table[col] = table["cell_id"] if default is None else default
    banded = table["relation"].eq("match") & table["design"].isin(BANDING)
    rows = BandRows.of(table)
    floors = {(hw, fp): machine_floor(table, hw, fp, coverage)
              for hw, fp in table.loc[banded, ["hardware", "fingerprint"]].drop_duplicates().itertuples(index=False)}
    reasons = {k: moe_unseen_reason(table, f"{k[0]}/{k[1]}", coverage) for k in floors}
    for m in METRICS:
        table[f"{m}_band"] = math.nan
        table[f"{m}_covered"] = pd.Series(pd.NA, index=table.index, dtype="object")
    table["band_basis"] = ""
    c = rows.cols
    for (hw, fp, fold), h in table[banded].groupby(["hardware", "fingerprint", "fold"], sort=False):
        same = ((c["hardware"] == hw) & (c["fingerprint"] == fp)
                & np.isin(c["configuration"], list(set(h["configuration"]))))
        bands = regime_bands(table, hw, fp, coverage, (c["fold"] != fold) & ~same, rows, reasons[(hw, fp)])
        for i, r in zip(h.index, h.to_dict("records"), strict=True):
            reg = regime_from_columns(r)
            for m in METRICS:
                ch = choose_band(reg, bands, m, floors[(hw, fp)].get(reg.base))
                table.at[i, f"{m}_band"] = ch.half
                e = abs(r[f"{m}_rel_error"])
                table.at[i, f"{m}_covered"] = bool(e <= ch.half) if e == e and ch.half == ch.half else pd.NA
                if m == "tokens_per_s_per_gpu":
                    table.at[i, "band_basis"] = ch.basis or f"refused: {ch.refused}"
    return table


def cross_errors(table: pd.DataFrame, key: str, coverage: float = COVERAGE) -> dict[str, float]:
    """A calibration's measured error on another engine build's or GPU type's cells: per metric, the ``coverage``
    quantile of its absolute errors on the cells of the fingerprints it was compared with (``design = cross``)."""
    if "calibration" not in table:
        return {}
    cross = table[design_of(table).eq("cross") & (table["relation"] != "match") & (table["calibration"] == key)]
    return {m: float(np.quantile(e, coverage)) for m in METRICS if len(e := cross[f"{m}_rel_error"].abs().dropna())}


def apply_validation(cals: dict[str, Calibration], table: pd.DataFrame, coverage: float = COVERAGE) -> None:
    """Store the validation's findings in the calibrations (in place): each one's band per regime
    (:func:`regime_bands`) and machine spread per base regime (:func:`machine_floor`), its dense bands as
    ``error_band`` / ``error_band_host_bound`` (the GPU-bound and host-bound regimes'), the coverage stated and
    measured on its held-out cells, and its cross-fingerprint error (:func:`cross_errors`)."""
    if table.empty:
        return
    rows = BandRows.of(table)
    for key, cal in cals.items():
        hw, fp = key.split("/", 1)
        cal.regime_bands = regime_bands(table, hw, fp, coverage, rows=rows)
        cal.machine_spread = machine_floor(table, hw, fp, coverage)
        cal.error_band = dict(cal.regime_bands[GPU_BOUND].band)
        cal.error_band_host_bound = dict(cal.regime_bands[HOST_BOUND].band)
        own = table[(table["relation"] == "match") & design_of(table).isin(HELD_OUT) & (table["hardware"] == hw)
                    & (table["fingerprint"] == fp)]
        cal.coverage = {"stated": coverage}
        for m in METRICS:
            cov = own[f"{m}_covered"].dropna() if f"{m}_covered" in own else pd.Series(dtype=bool)
            if len(cov):
                cal.coverage[m] = float(cov.astype(bool).mean())
        cal.cross_fingerprint_error = cross_errors(table, key, coverage)


class BandSummary(TypedDict):
    """One calibration's bands as a projected row takes them (:func:`band_summary`)."""

    hardware: str
    machines: int
    regimes: dict[str, RegimeBandDict]
    machine_spread: dict[str, dict[str, float]]


def band_summary(cals: dict[str, Calibration]) -> dict[str, BandSummary]:
    """Per calibration, the band a projected row takes in each regime and the spread between machines (after
    :func:`apply_validation`), JSON-ready."""
    return {k: {"hardware": c.hardware, "machines": len(c.machines),
                "regimes": {r: b.to_dict() for r, b in c.regime_bands.items()}, "machine_spread": c.machine_spread}
            for k, c in cals.items()}


__all__ = ["BAND_MIN_CELLS", "BandRows", "BandSummary", "add_bands", "apply_validation", "band_summary", "cross_errors",
           "machine_floor", "moe_unseen_reason", "regime_bands"]
