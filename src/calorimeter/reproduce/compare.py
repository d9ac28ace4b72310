"""Is a reproduction the reference again? Per configuration and metric: the difference, a tolerance, a verdict.

* **Configurations** are matched on every parameter that defines one (:data:`calorimeter.findings.select.CONFIG_PARAMS`
  but the hardware and the sweep's name); the repetitions of a configuration are its experimental units.
* **Difference**: reproduction / reference - 1 for throughput, power and energy (the ratio of the means, with its
  Welch interval made on the log scale); reproduction - reference in degrees Celsius for temperatures. Both come from
  the comparison core that the findings use (:mod:`calorimeter.findings.stats`: ``welch``, ``mean_interval``,
  ``verdict``).
* **Tolerance**: the larger of the metric's floor (:data:`METRICS`: 3% for throughput, average power and energy,
  3 degrees C for temperatures, 15% for peak power, which reads single 50 ms samples) and the run-to-run noise the
  two sides show: the half-width of the Welch interval where both sides have two repetitions or more, else the
  half-width of the repetition interval of the side that has one.
* **Verdict**: ``reproduced`` when the difference lies within the tolerance, ``differs`` when not, ``not comparable``
  with the reason when the two sides did not measure the same thing: another GPU type, another engine fingerprint
  (attention or fused kernels, overlap mechanism, torch version), or a configuration (or an ok repetition) missing
  on one side. ``interval_verdict`` is the core's stricter equivalence test of the same numbers (``agrees`` only when
  the whole 95% interval of the difference lies within the tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calorimeter.figures.selection import figure_cells
from calorimeter.findings.select import CONFIG_PARAMS
from calorimeter.findings.stats import Claim, mean_interval, verdict, welch
from calorimeter.records.legacy import config_ids
from calorimeter.reproduce.sources import Source, fingerprint_difference

REPRODUCED, DIFFERS, NOT_COMPARABLE = "reproduced", "differs", "not comparable"
VERDICTS = (REPRODUCED, DIFFERS, NOT_COMPARABLE)
#: parameters that make two cells the same configuration in a reproduction (the GPU type is checked separately)
MATCH_PARAMS: tuple[str, ...] = tuple(p for p in CONFIG_PARAMS if p not in ("hardware", "engine"))


@dataclass(frozen=True)
class Metric:
    """A compared metric.

    Attributes:
        column: the runs table's column.
        label: for the reader.
        unit: of the metric.
        relative: compare as a ratio (difference in percent) rather than a difference in the metric's unit.
        floor: the smallest tolerance (a fraction when relative, else in ``unit``).
        resolution: a quantized sensor's step (integer degrees C), added as ``step**2 / 12`` variance.
    """

    column: str
    label: str
    unit: str
    relative: bool
    floor: float
    resolution: float = 0.0


#: the compared metrics and their documented tolerance floors (docs/artifact.md "Evaluation and expected results")
METRICS: tuple[Metric, ...] = (
    Metric("tokens_per_s_per_gpu", "throughput", "tokens/s per GPU", True, 0.03),
    Metric("power_avg_w", "average power", "W", True, 0.03),
    Metric("energy_per_token_j", "energy per token", "J", True, 0.03),
    Metric("temp_avg_c", "average GPU temperature", "degC", False, 3.0, 1.0),
    Metric("temp_peak_c", "peak GPU temperature", "degC", False, 3.0, 1.0),
    Metric("power_peak_w", "peak power", "W", True, 0.15),
)
#: which metrics each figure draws (per-figure counts); cells per figure come from calorimeter.figures.selection
FIGURE_METRICS: dict[str, tuple[str, ...]] = {
    "throughput": ("tokens_per_s_per_gpu",),
    "fig04_parallelism": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig08_optimization": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig13_microbatch": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig17_temperature": ("temp_avg_c", "temp_peak_c"),
    "scale_compare": ("tokens_per_s_per_gpu", "energy_per_token_j"),
}


def metrics_with_floors(floors: Mapping[str, float] | None = None) -> tuple[Metric, ...]:
    """:data:`METRICS` with some floors replaced (``{column: floor}``); an unknown column is an error."""
    floors = dict(floors or {})
    known = {m.column for m in METRICS}
    bad = sorted(set(floors) - known)
    if bad:
        raise KeyError(f"unknown metric {', '.join(bad)} for a tolerance floor; known: {', '.join(sorted(known))}")
    for k, v in floors.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"tolerance floor of {k}: {v!r} is not a number >= 0")
    return tuple(Metric(m.column, m.label, m.unit, m.relative, float(floors.get(m.column, m.floor)), m.resolution)
                 for m in METRICS)


def _key(row: Mapping) -> tuple:
    def norm(v: object) -> object:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, float, np.integer, np.floating)) and float(v).is_integer():
            return int(v)
        return v
    return tuple(norm(row.get(p)) for p in MATCH_PARAMS)


@dataclass
class _Config:
    config_id: str
    rows: pd.DataFrame  # every repetition (any status)

    @property
    def ok(self) -> pd.DataFrame:
        return self.rows[self.rows["status"] == "ok"]


def _configs(runs: pd.DataFrame) -> dict[tuple, _Config]:
    if runs.empty:
        return {}
    runs = runs[runs["status"].isin(["ok", "oom", "failed"])]  # measured (planned-only or pruned rows are not)
    out: dict[tuple, _Config] = {}
    for cid, g in runs.assign(_c=config_ids(runs)).groupby("_c", sort=False):
        out.setdefault(_key(g.iloc[0].to_dict()), _Config(str(cid), g.drop(columns="_c")))
    return out


def _gpu_types(rows: pd.DataFrame) -> set[str]:
    col = "devices" if "devices" in rows.columns and rows["devices"].notna().any() else "hardware"
    return {str(v) for v in rows[col].dropna()} if col in rows.columns else set()


def _engines(rows: pd.DataFrame, engines: Mapping[str, str]) -> set[str]:
    return {engines[c] for c in rows["cell_id"] if c in engines}


def _values(rows: pd.DataFrame, column: str) -> list[float]:
    if column not in rows.columns:
        return []
    v = pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)
    return [float(x) for x in v[np.isfinite(v)]]


def _half_width(low: float, high: float) -> float:
    return (high - low) / 2 if math.isfinite(low) and math.isfinite(high) else math.nan


def compare_metric(ref: list[float], rep: list[float], metric: Metric) -> dict:
    """One metric of one configuration: means, intervals, difference, tolerance and verdict."""
    r_ci = mean_interval(ref, metric.resolution)
    p_ci = mean_interval(rep, metric.resolution)
    row = {"metric": metric.column, "label": metric.label, "unit": metric.unit,
           "reference_mean": r_ci.value, "reference_ci95_low": r_ci.low, "reference_ci95_high": r_ci.high,
           "reference_n": len(ref), "reproduction_mean": p_ci.value, "reproduction_ci95_low": p_ci.low,
           "reproduction_ci95_high": p_ci.high, "reproduction_n": len(rep),
           "difference_unit": "fraction" if metric.relative else metric.unit}
    if not ref or not rep:
        side = "reference" if not ref else "reproduction"
        return {**row, "difference": math.nan, "verdict": NOT_COMPARABLE,
                "reason": f"no value of {metric.column} in the {side}"}
    if metric.relative:
        eff = welch(rep, ref, ratio=True)
        shift = 1.0
        side_noise = [_half_width(c.low, c.high) / c.value for c in (r_ci, p_ci)
                      if c.has_interval and c.value > 0]
    else:
        eff = welch(rep, ref, resolution=metric.resolution)
        shift = 0.0
        side_noise = [_half_width(c.low, c.high) for c in (r_ci, p_ci) if c.has_interval]
    if not math.isfinite(eff.value):
        return {**row, "difference": math.nan, "verdict": NOT_COMPARABLE, "reason": eff.method}
    diff = eff.value - shift
    if eff.has_interval:
        noise, noise_from = max(eff.high - eff.value, eff.value - eff.low), eff.method
    elif side_noise:
        noise, noise_from = max(side_noise), "repetition interval of one side"
    else:
        noise, noise_from = 0.0, "one repetition each: floor only"
    tol = max(metric.floor, noise)
    ok = abs(diff) <= tol
    judged = verdict(eff, Claim(sign=0, null=shift, tolerance=tol))
    fmt = (lambda x: f"{100 * x:+.1f}%") if metric.relative else (lambda x: f"{x:+.1f} {metric.unit}")
    return {**row, "difference": diff, "difference_ci95_low": eff.low - shift, "difference_ci95_high": eff.high - shift,
            "tolerance": tol, "tolerance_from": "floor" if tol == metric.floor else noise_from,
            "verdict": REPRODUCED if ok else DIFFERS,
            "reason": f"{fmt(diff)} {'within' if ok else 'beyond'} +-{fmt(tol)[1:]}",
            "interval_verdict": judged.verdict, "interval_why": judged.why}


def compare(reference: Source, reproduction: Source, metrics: tuple[Metric, ...] = METRICS,
            subset: bool = False) -> pd.DataFrame:
    """One row per (reference configuration, metric), plus one per reproduction configuration the reference lacks.

    ``subset``: the reproduction measured only some of the reference's configurations on purpose; the others are
    left out instead of reported as missing.
    """
    ref, rep = _configs(reference.runs), _configs(reproduction.runs)
    rows: list[dict] = []

    def add(cfg: _Config, other: _Config | None, res: list[dict]) -> None:
        r0 = cfg.rows.iloc[0]
        base = {"config_id": cfg.config_id, "reproduction_config_id": other.config_id if other else "",
                "model": r0.get("model"), "hardware": r0.get("hardware"),
                "parallel_label": r0.get("parallel_label"), "optimization_label": r0.get("optimization_label"),
                "micro_batch": r0.get("micro_batch"), "placement": r0.get("placement")}
        rows.extend({**base, **r} for r in res)

    def not_comparable(reason: str) -> list[dict]:
        return [{"metric": m.column, "label": m.label, "unit": m.unit, "verdict": NOT_COMPARABLE, "reason": reason}
                for m in metrics]

    for key, cfg in ref.items():
        other = rep.get(key)
        kind = str(cfg.rows.iloc[0].get("kind") or "train")
        if kind != "train":
            add(cfg, other, not_comparable(f"a {kind} cell: no training metrics to compare"))
            continue
        if other is None:
            if not subset:
                add(cfg, None, not_comparable("missing cell: the reproduction has no such configuration"))
            continue
        if cfg.ok.empty or other.ok.empty:
            st_ref, st_rep = (", ".join(sorted(set(c.rows["status"]))) for c in (cfg, other))
            if not other.ok.empty:
                why = f"the reference has no ok repetition (status {st_ref}): nothing to compare with"
            elif cfg.ok.empty:
                why = f"no ok repetition on either side (reference {st_ref}, reproduction {st_rep})"
            else:  # the reference measured it and the reproduction did not: a missing cell
                why = f"missing cell: no ok repetition in the reproduction (status {st_rep})"
            add(cfg, other, not_comparable(why))
            continue
        g_ref, g_rep = _gpu_types(cfg.ok), _gpu_types(other.ok)
        if g_ref and g_rep and g_ref != g_rep:
            add(cfg, other, not_comparable(f"other GPU type: {', '.join(sorted(g_rep))} vs the reference's "
                                           f"{', '.join(sorted(g_ref))}"))
            continue
        e_ref, e_rep = _engines(cfg.ok, reference.engines), _engines(other.ok, reproduction.engines)
        if e_ref and e_rep and e_ref != e_rep:
            diff = "; ".join(sorted({fingerprint_difference(a, b) for a in e_ref for b in e_rep} - {""}))
            add(cfg, other, not_comparable(f"engine fingerprint differs (reproduction vs reference): {diff}"))
            continue
        add(cfg, other, [compare_metric(_values(cfg.ok, m.column), _values(other.ok, m.column), m)
                         for m in metrics])
    for key, cfg in rep.items():
        if key not in ref and str(cfg.rows.iloc[0].get("kind") or "train") == "train":
            add(cfg, None, not_comparable("not in the reference: nothing to compare with"))
            rows[-len(metrics):] = [{**r, "config_id": "", "reproduction_config_id": cfg.config_id}
                                    for r in rows[-len(metrics):]]
    cols = ["config_id", "reproduction_config_id", "model", "hardware", "parallel_label", "optimization_label",
            "micro_batch", "placement", "metric", "label", "unit",
            *(f"{side}_{k}" for side in ("reference", "reproduction") for k in ("mean", "ci95_low", "ci95_high", "n")),
            "difference", "difference_unit", "difference_ci95_low", "difference_ci95_high", "tolerance",
            "tolerance_from", "verdict", "reason", "interval_verdict", "interval_why"]
    return pd.DataFrame(rows).reindex(columns=cols)


def figure_counts(result: pd.DataFrame, reference: Source) -> pd.DataFrame:
    """Verdict counts per figure (the reference cells it draws x the metrics it shows) and overall."""
    runs = reference.runs
    cid = dict(zip(runs["cell_id"], config_ids(runs), strict=True)) if not runs.empty else {}
    plan = runs.to_dict("records") if not runs.empty else []
    out = []
    for fig, mets in FIGURE_METRICS.items():
        try:
            cells = figure_cells(fig, plan)
        except Exception:  # noqa: BLE001 - a figure's selection that cannot read old tables counts every cell
            cells = list(cid)
        configs = {cid.get(c) for c in cells}
        sub = result[result["config_id"].isin(configs) & result["metric"].isin(mets)]
        out.append({"figure": fig, **{v: int((sub["verdict"] == v).sum()) for v in VERDICTS}})
    out.append({"figure": "all", **{v: int((result["verdict"] == v).sum()) for v in VERDICTS}})
    return pd.DataFrame(out)


def passed(result: pd.DataFrame) -> bool:
    """Every comparable metric reproduced, at least one compared, and no reference configuration missing."""
    comparable = result[result["verdict"] != NOT_COMPARABLE]
    missing = result["reason"].fillna("").str.startswith("missing cell") & (result["config_id"] != "")
    return bool(len(comparable)) and bool((comparable["verdict"] == REPRODUCED).all()) and not bool(missing.any())
