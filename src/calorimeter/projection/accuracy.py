"""The summaries of a validation: per fold, per engine and per regime, the median, largest and mean signed errors over
held-out cells (runs) and over configurations on a machine (repetitions averaged), the coverage of the bands with its
interval, whether the targets are met, the run-to-run spread a perfect projection would still miss, and how far one
configuration moves between machines (validation.json).
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from calorimeter.projection.measured import HOST_BOUND_BUSY_FRAC, MeasuredSet
from calorimeter.projection.regimes import BASE_REGIMES, EXTRAPOLATIONS, MOE_UNSEEN, band_key
from calorimeter.projection.targets import (
    BANDING,
    COVERAGE,
    HELD_OUT,
    METRICS,
    TARGET_MAX,
    TARGET_MEAN_SIGNED,
    TARGET_MEDIAN,
    design_of,
    host_bound_rows,
    row_regimes,
)
from calorimeter.projection.validation import fold_key


class RunSpread(TypedDict):
    """How far single runs of one regime stray from their configuration's mean on their machine (:func:`run_spread`).

    Attributes:
        runs: runs of the regime; ``groups_repeated``: (configuration, machine) groups with repetitions; ``dof``:
            runs - groups over those.
        sd_log: pooled standard deviation of the log metric; ``sd_log_90``: its 90% interval (chi-square).
        p_max_within_target: probability that an exact prediction stays within the max target of every run, at
            ``sd``, ``sd_low`` and ``sd_high``.
    """

    runs: int
    groups_repeated: int
    dof: int
    sd_log: float
    sd_log_90: list[float]
    p_max_within_target: dict[str, float]


class RegimeCoverage(TypedDict):
    """One regime's errors of a metric and its band coverage (:func:`regime_coverage`)."""

    rows: int
    engines: list[str]
    median_abs: float
    max_abs: float
    mean_signed: float
    band_median: float
    banded: int
    covered: int
    coverage: float
    coverage_90: list[float]
    met: bool


class ConfigurationSpread(TypedDict):
    """One configuration measured on two or more machines: each machine's mean iteration time, slowest / fastest."""

    configuration: str
    host_bound: bool
    cells: int
    machines: dict[str, float]
    ratio: float


class SpreadSummary(TypedDict):
    """The configurations of one regime measured on several machines: how many, the largest ratio between machines,
    the largest within one machine (repetitions)."""

    configurations: int
    max_ratio: float
    within_machine_max_ratio: float


class MachineSpread(TypedDict):
    """One engine's spread between machines (:func:`machine_spread`)."""

    host_bound: SpreadSummary
    gpu_bound: SpreadSummary
    configurations: list[ConfigurationSpread]


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """Per fold and metric: cells, median / largest absolute and mean signed relative error over all held-out cells
    and over the GPU-bound ones (host-bound cells flagged, kept); band coverage where bands exist; the cells above
    :data:`TARGET_MAX` with their notes."""
    out: dict[str, Any] = {}
    for fold, t in table.groupby("fold", sort=False):
        out[str(fold)] = _stats(t)
    return out


def repetition_means(t: pd.DataFrame) -> pd.DataFrame:
    """One row per held-out configuration on one machine (its fold and the runs' ``machine``): measured and predicted
    values averaged over its repetitions, the relative errors of the averages. The unit of a projection: it predicts
    what a configuration does on a machine, not one run of it; in the host-bound regime one configuration's runs on
    one machine differ by up to 1.30x (docs/projection.md, "Host speed per machine"), which no projection made before
    the run can follow. ``runs``: the repetitions averaged; host-bound and extrapolated where
    any of them was."""
    if t.empty:
        return t
    g = t.assign(machine=t["machine"].fillna("?") if "machine" in t else "?")
    rows = []
    for (fold, machine), r in g.groupby(["fold", "machine"], sort=True):
        row: dict[str, Any] = {"fold": fold, "machine": machine, "runs": len(r),
                               "notes": "host-bound" if host_bound_rows(r).any() else "",
                               "extrapolated": bool(r["extrapolated"].fillna(False).astype(bool).any())
                               if "extrapolated" in r else False}
        for m in METRICS:
            meas, pred = r[f"{m}_measured"].mean(), r[f"{m}_predicted"].mean()
            row[f"{m}_rel_error"] = pred / meas - 1.0 if meas == meas and meas > 0 and pred == pred else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def run_spread(t: pd.DataFrame, metric: str = "tokens_per_s_per_gpu", target: float = TARGET_MAX,
               draws: int = 20000) -> dict[str, RunSpread]:
    """How far single runs stray from their configuration's mean on their machine, per regime (measured host-bound or
    not), and what that leaves of the max target: the pooled standard deviation of log ``metric`` about each
    (configuration, machine) mean over the groups with repetitions (``dof`` = runs - groups), its 90% interval
    (chi-square), and the probability that a prediction exact for every configuration on every machine still stays
    within ``target`` of every run (normal run effects, ``draws`` simulated sets of as many runs as the regime has;
    fixed seed), at the estimate and at both ends of its interval. A max target a perfect projection would miss is
    not a target a projection can meet (host-bound H200 runs: SD 7.8%, docs/projection.md)."""
    from scipy.stats import chi2  # heavy: only the validation summary needs it

    out: dict[str, RunSpread] = {}
    if t.empty:
        return out
    rng = np.random.default_rng(0)
    machine = t["machine"].fillna("?") if "machine" in t else pd.Series("?", index=t.index)
    for name, sel in (("host_bound", host_bound_rows(t)), ("gpu_bound", ~host_bound_rows(t))):
        g = t[sel].assign(_m=machine[sel], _y=np.log(t.loc[sel, f"{metric}_measured"]))
        res, dof = [], 0
        for _, x in g.dropna(subset=["_y"]).groupby(["fold", "_m"]):
            if len(x) >= 2:
                res.extend(x["_y"] - x["_y"].mean())
                dof += len(x) - 1
        if dof < 2:
            continue
        sd = float(np.sqrt(np.sum(np.square(res)) / dof))
        lo, hi = sd * math.sqrt(dof / chi2.ppf(0.95, dof)), sd * math.sqrt(dof / chi2.ppf(0.05, dof))
        n = int(g["_y"].notna().sum())
        p_met = {}
        for k, v in (("sd", sd), ("sd_low", lo), ("sd_high", hi)):
            e = rng.normal(0.0, v, (draws, n))  # a run's log deviation: within target is e in [ln(1-t), ln(1+t)]
            p_met[k] = float(((e <= math.log1p(target)) & (e >= math.log1p(-target))).all(axis=1).mean())
        out[name] = {"runs": n, "groups_repeated": int(len(res) - dof), "dof": dof, "sd_log": sd,
                     "sd_log_90": [lo, hi], "p_max_within_target": p_met}
    return out


def _errors(t: pd.DataFrame, m: str, suffix: str) -> dict[str, float]:
    e = t[f"{m}_rel_error"].dropna()
    return {f"median_abs{suffix}": _q(e.abs(), 0.5), f"max_abs{suffix}": float(e.abs().max()) if len(e) else math.nan,
            f"mean_signed{suffix}": float(e.mean()) if len(e) else math.nan, f"cells{suffix}": len(e)}


def _in_range(t: pd.DataFrame) -> pd.Series:
    return ~t["extrapolated"].fillna(False).astype(bool) if "extrapolated" in t else pd.Series(True, index=t.index)


def _stats(t: pd.DataFrame) -> dict[str, Any]:
    """Per metric: median / largest absolute and mean signed relative error over every held-out cell (run), over the
    GPU-bound ones (suffix ``_gpu_bound``), over those inside the calibration's range (``_in_range``: not
    extrapolated) and over configurations on a machine with their repetitions averaged (``_per_machine``,
    :func:`repetition_means`)."""
    gpu_bound, in_range, means = t[~host_bound_rows(t)], t[_in_range(t)], repetition_means(t)
    f: dict[str, Any] = {"cells": len(t), "gpu_bound_cells": len(gpu_bound), "in_range_cells": len(in_range),
                         "configurations_on_machines": len(means)}
    for m in METRICS:
        f[m] = {**_errors(t, m, ""), **_errors(gpu_bound, m, "_gpu_bound"), **_errors(in_range, m, "_in_range"),
                **_errors(means, m, "_per_machine")}
        if f"{m}_covered" in t:
            cov = t[f"{m}_covered"].dropna()
            f[m]["coverage"] = float(cov.astype(bool).mean()) if len(cov) else math.nan
            f[m]["banded"] = len(cov)
            f[m]["band_median"] = _q(t[f"{m}_band"].dropna(), 0.5)
            f[m]["regimes"] = regime_coverage(t, m)
    worst = t[(t["tokens_per_s_per_gpu_rel_error"].abs() > TARGET_MAX)
              | (t["energy_per_token_j_rel_error"].abs() > TARGET_MAX)]
    f["over_max"] = [{"cell_id": r.cell_id, "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu_rel_error),
                      "energy_per_token": float(r.energy_per_token_j_rel_error), "notes": r.notes}
                     for r in worst.itertuples()]
    return f


def _q(e: pd.Series, q: float) -> float:
    return float(np.quantile(e, q)) if len(e) else math.nan


def loco_summary(table: pd.DataFrame, coverage: float = COVERAGE, fingerprints: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """The validation.json of the leave-one-configuration-out design: per (GPU type, fingerprint) the pooled
    statistics over its held-out cells (all, and GPU-bound) and the targets, per fold the same, and the measured
    cross-fingerprint errors (the ``coverage`` quantile of the absolute errors of each other calibration)."""
    out: dict[str, Any] = {"coverage_stated": coverage, "targets": {
        "median_abs": TARGET_MEDIAN, "max_abs": TARGET_MAX, "mean_signed": TARGET_MEAN_SIGNED,
        "coverage": coverage}, "groups": {}, "cross_fingerprint": {}}
    if table.empty:
        return out
    match = table[(table["relation"] == "match") & design_of(table).isin(HELD_OUT)]
    for (hw, fp), g in match.groupby(["hardware", "fingerprint"]):
        if fingerprints is not None and fingerprints.get(hw) != fp:
            continue
        pooled = _stats(g)
        pooled["folds"] = int(g["fold"].nunique())
        pooled["sources"] = sorted(set(g["source"]))
        pooled["targets_met"] = targets_met(pooled, coverage)
        pooled["targets_met_gpu_bound"] = targets_met(pooled, coverage, suffix="_gpu_bound")
        pooled["targets_met_in_range"] = targets_met(pooled, coverage, suffix="_in_range")
        pooled["targets_met_per_machine"] = targets_met(pooled, coverage, suffix="_per_machine")
        pooled["run_spread"] = run_spread(g)
        pooled["per_fold"] = {str(k): _fold_row(v) for k, v in g.groupby("fold", sort=True)}
        out["groups"][f"{hw}/{fp}"] = pooled
    banded = table[(table["relation"] == "match") & design_of(table).isin(BANDING)]
    out["regimes"] = {m: regime_coverage(banded, m, coverage) for m in ("tokens_per_s_per_gpu", "energy_per_token_j",
                                                                          "power_avg_w")}
    for fold, g in table[design_of(table).isin(("cross", "cross-moe"))].groupby("fold"):
        out["cross_fingerprint"][str(fold)] = {
            "cells": len(g), "calibration": str(g["calibration"].iloc[0]), "relation": str(g["relation"].iloc[0]),
            **{m: {"quantile_abs": _q(g[f"{m}_rel_error"].abs().dropna(), coverage),
                   "median_abs": _q(g[f"{m}_rel_error"].abs().dropna(), 0.5),
                   "mean_signed": float(g[f"{m}_rel_error"].mean())} for m in METRICS}}
    return out


def _fold_row(g: pd.DataFrame) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": len(g), "host_bound": bool(host_bound_rows(g).any())}
    for m in METRICS:
        e = g[f"{m}_rel_error"]
        row[m] = {"mean_signed": float(e.mean()) if e.notna().any() else math.nan,
                  "max_abs": float(e.abs().max()) if e.notna().any() else math.nan,
                  "band": float(g[f"{m}_band"].iloc[0]) if f"{m}_band" in g else math.nan,
                  "covered": (float(g[f"{m}_covered"].dropna().astype(bool).mean())
                              if f"{m}_covered" in g and g[f"{m}_covered"].notna().any() else math.nan)}
    row["notes"] = sorted({n for n in g["notes"] if n})
    return row


def targets_met(stats: dict[str, Any], coverage: float = COVERAGE, suffix: str = "") -> dict[str, bool]:
    """Each target against pooled statistics (``suffix``: ``_gpu_bound`` for the GPU-bound cells, ``_in_range``
    for those inside the calibration's range, ``_per_machine`` for configurations on a machine, repetitions
    averaged: :func:`_stats`; the coverage is checked over every cell only)."""
    res = {f"median_abs {m}": bool(stats[m][f"median_abs{suffix}"] <= v) for m, v in TARGET_MEDIAN.items()}
    res["max_abs"] = all(not (stats[m][f"max_abs{suffix}"] > TARGET_MAX) for m in TARGET_MEDIAN)
    res["mean_signed"] = all(not (abs(stats[m][f"mean_signed{suffix}"]) > TARGET_MEAN_SIGNED) for m in TARGET_MEDIAN)
    if not suffix:  # over all rows, and in each regime
        res["coverage"] = all(coverage_met(stats[m].get("coverage", math.nan), stats[m].get("banded", 0), coverage)
                              and all(r["met"] for r in stats[m].get("regimes", {}).values())
                              for m in METRICS)
    return res


def coverage_interval(covered: int, rows: int, level: float = COVERAGE) -> tuple[float, float]:
    """The ``level`` interval of a coverage measured as ``covered`` of ``rows`` (binomial, Clopper-Pearson);
    ``(0, 1)`` without rows."""
    if rows <= 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # heavy: only the validation summary needs it

    ci = binomtest(int(covered), int(rows)).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def coverage_met(measured: float, cells: int, stated: float = COVERAGE) -> bool:
    """Whether a measured band coverage is consistent with the stated one: the stated coverage lies below the upper
    end of the measured share's 90% interval (:func:`coverage_interval`; a one-sided test at 5%: 33 of 38 cells
    covered meet 90%, 30 of 38 do not). No cells: nothing to contradict it."""
    if measured != measured or cells <= 0:
        return True
    return coverage_interval(round(measured * cells), cells)[1] >= stated


def regime_coverage(t: pd.DataFrame, metric: str, stated: float = COVERAGE) -> dict[str, RegimeCoverage]:
    """Per regime (:func:`~calorimeter.projection.regimes.band_key`: a base regime's rows inside their calibration's
    range; an extrapolation's within its base regime, every row outside the range in that way, alone or among
    others): rows, the median and largest absolute and the mean signed error of ``metric``, the median band, the rows
    within their band (``covered`` of ``banded``: refused rows and metrics without a band excluded) with the 90%
    interval of that share, and whether it meets the stated coverage (:func:`coverage_met`)."""
    out: dict[str, RegimeCoverage] = {}
    if t.empty or f"{metric}_band" not in t:
        return out
    regimes = row_regimes(t)
    base, extra = regimes.str[0], regimes.str[1:]
    members = {}
    for b in BASE_REGIMES:
        members[b] = (base == b) & (extra.str.len() == 0)
        for x in (*EXTRAPOLATIONS, MOE_UNSEEN):
            members[band_key(b, x)] = (base == b) & extra.map(lambda e, x=x: x in e)
    for key, sel in members.items():
        if not sel.any():
            continue
        r = t[sel]
        e = r[f"{metric}_rel_error"].dropna()
        cov = r[f"{metric}_covered"].dropna().astype(bool)
        lo, hi = coverage_interval(int(cov.sum()), len(cov))
        share = float(cov.mean()) if len(cov) else math.nan
        out[key] = {"rows": len(r), "engines": sorted({f"{h}/{f}" for h, f in zip(r["hardware"], r["fingerprint"],
                                                                                   strict=True)}),
                    "median_abs": _q(e.abs(), 0.5), "max_abs": float(e.abs().max()) if len(e) else math.nan,
                    "mean_signed": float(e.mean()) if len(e) else math.nan,
                    "band_median": _q(r[f"{metric}_band"].dropna(), 0.5), "banded": len(cov),
                    "covered": int(cov.sum()), "coverage": share, "coverage_90": [lo, hi],
                    "met": coverage_met(share, len(cov), stated)}
    return out


def machine_spread(ms: MeasuredSet) -> dict[str, MachineSpread]:
    """How far one configuration's iteration time moves between machines: the floor under any projection that does
    not know the machine. Per (GPU type, fingerprint), every configuration (:func:`fold_key`) measured on two or
    more physical machines (the runs' ``machine``, told apart by their GPUs' UUIDs:
    :func:`calorimeter.records.machines.machine_keys`) gives the ratio of its slowest to its fastest machine's mean
    iteration time; host-bound (any cell's GPUs busy < 80% of its iteration) and GPU-bound configurations are
    summarised apart, with the repetition spread within one machine beside them (the largest max/min ratio of one
    configuration's cells on one machine)."""
    if "machine" not in ms.runs.columns:
        return {}
    runs = ms.runs.assign(fold_key=[fold_key(r) for _, r in ms.runs.iterrows()]).dropna(subset=["machine"])
    out: dict[str, MachineSpread] = {}
    for (hw, fp), g in runs.groupby(["hardware", "fingerprint"]):
        rows: list[ConfigurationSpread] = []
        within = {"host_bound": 1.0, "gpu_bound": 1.0}
        for fk, c in g.groupby("fold_key"):
            hb = bool((c["busy_frac"] < HOST_BOUND_BUSY_FRAC).any())
            t = c.groupby("machine")["iteration_time_s"]
            kind = "host_bound" if hb else "gpu_bound"
            within[kind] = max(within[kind], float((t.max() / t.min()).max()))
            if t.ngroups >= 2:
                means = t.mean()
                rows.append({"configuration": str(fk), "host_bound": hb, "cells": len(c),
                             "machines": {str(k): float(v) for k, v in means.items()},
                             "ratio": float(means.max() / means.min())})
        summary: dict[str, SpreadSummary] = {}
        for kind, hb in (("host_bound", True), ("gpu_bound", False)):
            r = [x["ratio"] for x in rows if x["host_bound"] == hb]
            summary[kind] = {"configurations": len(r), "max_ratio": max(r) if r else math.nan,
                             "within_machine_max_ratio": within[kind]}
        out[f"{hw}/{fp}"] = {"host_bound": summary["host_bound"], "gpu_bound": summary["gpu_bound"],
                             "configurations": rows}
    return out


__all__ = ["ConfigurationSpread", "MachineSpread", "RegimeCoverage", "RunSpread", "SpreadSummary",
           "coverage_interval", "coverage_met", "loco_summary", "machine_spread", "regime_coverage",
           "repetition_means", "run_spread", "summarize", "targets_met"]
