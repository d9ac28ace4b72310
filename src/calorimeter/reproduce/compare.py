"""Is a reproduction the reference again? Per configuration and metric: the difference, the noise it is judged
against, a verdict; per figure and overall, the verdict of the rows it draws.

* **Configurations** are matched on every parameter that defines one (:data:`calorimeter.findings.select.CONFIG_PARAMS`
  but the hardware and the sweep's name); the repetitions of a configuration are its experimental units.
* **Difference**: reproduction / reference - 1 (ratio of the means) for throughput, power and energy; reproduction -
  reference in °C for temperatures.
* **Noise**: the run-to-run noise of the metric in the reference configuration's regime (GPU- or host-bound, thermally
  steady or transient windows), pooled over the committed sets with its own degrees of freedom, for these repetition
  counts and machines (:mod:`calorimeter.reproduce.noise`): never the two sides' own 2-3 repetitions alone, whose
  t-interval explodes (one degree of freedom: t = 12.7). ``noise_half_width`` is the half-width ``h`` of the
  difference's 95% interval under it.
* **Verdict**, with the metric's floor ``f`` (:data:`~calorimeter.reproduce.metrics.METRICS`, the smallest difference
  that counts) and the tolerance ``max(f, h)``:

  - ``not reproduced``: the difference lies beyond the tolerance: beyond the floor and beyond what the noise explains;
  - ``cannot tell``: ``h > f``, the noise is too large to see a difference of the floor's size (the difference lies
    within it); or a side's repetitions spread more than the noise model allows (an F-test per side, its p-values
    adjusted over every side the comparison tests, Benjamini-Hochberg, below :data:`SPREAD_P`: a comparison of 30
    rows makes 60 such tests, and one of them under 1% by chance alone is no sign that the model misdescribes it); or
    the committed sets hold no noise for this regime;
  - ``reproduced``: ``h <= f`` (the test sees a difference of the floor's size) and the difference lies within the
    floor. Never for a difference beyond the floor.
  - ``not comparable`` with the reason where the two sides did not measure the same thing: another GPU type, another
    engine fingerprint, a configuration (or an ok repetition) missing on one side, a cell without training metrics.

  ``interval_verdict`` is the findings' core (:func:`calorimeter.findings.stats.verdict`) on the same interval:
  ``agrees`` (the whole 95% interval within the floor) implies *reproduced*, ``disagrees`` (wholly beyond it)
  implies *not reproduced*; the two differ only where the interval straddles the floor (*cannot say*).
* **Overall** and **per figure** (the rows of the configurations a figure draws and the metrics it shows): *not
  reproduced* when a row is not reproduced or a reference configuration is missing, else *cannot tell* when a row
  cannot tell, else *reproduced* (*not comparable* when nothing was compared). ``calorimeter compare`` exits with
  :data:`EXIT_CODES` of the overall verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from calorimeter.figures.selection import figure_cells
from calorimeter.findings.select import CONFIG_PARAMS, param_value
from calorimeter.findings.stats import CANNOT_SAY, Claim, Effect, Judgement, mean_interval, verdict
from calorimeter.plan.cell import id_knobs
from calorimeter.plan.kinds import DEFAULT_KIND, kinds_where
from calorimeter.records.legacy import config_ids
from calorimeter.records.machines import machine_keys
from calorimeter.reproduce.metrics import FIGURE_METRICS, METRICS, Metric
from calorimeter.reproduce.noise import (
    Noise,
    NoiseModel,
    bound_of,
    busy_share,
    load_noise,
    thermal_of,
    thermal_regime,
    transformed,
)
from calorimeter.reproduce.sources import Source, fingerprint_difference

REPRODUCED, NOT_REPRODUCED, CANNOT_TELL, NOT_COMPARABLE = "reproduced", "not reproduced", "cannot tell", \
    "not comparable"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, CANNOT_TELL, NOT_COMPARABLE)
#: ``calorimeter compare``'s exit status per overall verdict (2: the command could not run)
EXIT_CODES = {REPRODUCED: 0, NOT_REPRODUCED: 1, NOT_COMPARABLE: 1, CANNOT_TELL: 3}
#: a side whose repetitions spread so much that the noise model gives it less than this chance (adjusted over the
#: comparison's tests: a false-discovery rate) is not judged by it
SPREAD_P = 0.01
#: parameters that make two cells the same configuration in a reproduction (the GPU type is checked separately)
MATCH_PARAMS: tuple[str, ...] = tuple(p for p in CONFIG_PARAMS if p not in ("hardware", "engine"))


def _id_knobs(config_id: str) -> tuple:
    """What the configuration's id names beyond the matched columns (:data:`ID_ONLY`), in that order: two
    configurations of one set that differ only there stay two."""
    return tuple(param_value(v) for v in id_knobs(config_id).values())


def _key(row: Mapping, config_id: str = "") -> tuple:
    return (*(param_value(row.get(p)) for p in MATCH_PARAMS), *_id_knobs(config_id))


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
        out.setdefault(_key(g.iloc[0].to_dict(), str(cid)), _Config(str(cid), g.drop(columns="_c")))
    return out


def _gpu_types(rows: pd.DataFrame) -> set[str]:
    col = "devices" if "devices" in rows.columns and rows["devices"].notna().any() else "hardware"
    return {str(v) for v in rows[col].dropna()} if col in rows.columns else set()


def _engines(rows: pd.DataFrame, engines: Mapping[str, str]) -> set[str]:
    return {engines[c] for c in rows["cell_id"] if c in engines}


def _values(rows: pd.DataFrame, column: str, machines: list[str]) -> tuple[list[float], list[str]]:
    """The finite values of ``column`` and the machine of each."""
    if column not in rows.columns:
        return [], []
    v = pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)
    keep = np.isfinite(v)
    return [float(x) for x in v[keep]], [m for m, k in zip(machines, keep, strict=True) if k]


def _machine_names(reference: Source, reproduction: Source) -> tuple[dict[str, str], dict[str, str]]:
    """Cell id -> machine on each side, named over both sides' GPUs at once (the same machine gets one name)."""
    parts = [s.gpus.assign(cell_id=f"{tag}|" + s.gpus["cell_id"].astype(str))
             for tag, s in (("a", reference), ("b", reproduction)) if not s.gpus.empty]
    keys = machine_keys(pd.concat(parts, ignore_index=True)) if parts else {}
    split: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for c, m in keys.items():
        tag, _, cell = c.partition("|")
        split[tag == "b"][cell] = m
    return split


def _machines_of(rows: pd.DataFrame, names: Mapping[str, str]) -> list[str]:
    """Each repetition's machine; one whose machine is unknown is its own machine (the same measurement read twice is
    the same one: it is named by its cell and start)."""
    start = rows["measured_begin_s"] if "measured_begin_s" in rows.columns else pd.Series("", index=rows.index)
    return [names.get(c) or f"?{c}@{s}" for c, s in zip(rows["cell_id"].astype(str), start, strict=True)]


def _shares(machines: list[str]) -> dict[str, float]:
    """Machine -> share of the repetitions on it."""
    return {k: v / len(machines) for k, v in pd.Series(machines).value_counts().items()} if machines else {}


def machine_difference(ref: Mapping[str, float], rep: Mapping[str, float]) -> float:
    """``c``: sum over machines of (reference share - reproduction share) ** 2 (0 same machines, 2 two others)."""
    return float(sum((ref.get(m, 0.0) - rep.get(m, 0.0)) ** 2 for m in set(ref) | set(rep)))


@dataclass(frozen=True)
class Spread:
    """An F-test of one side's repetition variance within each machine against the pooled repetition variance."""

    sd: float  #: the side's repetition SD on the metric's scale (pooled within machines)
    dof: int
    p: float  #: its chance under the noise model
    q: float  #: ``p`` adjusted over the comparison's tests (Benjamini-Hochberg); ``p`` when tested alone

    def why(self, side: str, metric: Metric, noise: Noise) -> str:
        """Why the side's repetitions are not described by the noise model ("" when they are)."""
        if self.q >= SPREAD_P:
            return ""
        sd = (lambda x: f"{100 * x:.1f}%") if metric.relative else (lambda x: f"{x:.1f} {metric.unit}")
        adjusted = f", {self.q:.2g} over the comparison's tests" if self.q != self.p else ""
        return (f"the {side}'s repetitions spread {sd(self.sd)} (sd on one machine), more than the noise model's "
                f"{sd(noise.repetition_sd)} allows (F-test p = {self.p:.2g}{adjusted})")


def spread_test(values: list[float], machines: list[str] | None, metric: Metric, noise: Noise | None) -> Spread | None:
    """The side's :class:`Spread` (``q`` = ``p``), None where nothing can be tested (no noise, < 2 repetitions on
    any machine). ``machines``: one per value; None: one machine."""
    if noise is None or not noise.repetition_dof or not noise.repetition_sd > 0:
        return None
    machines = machines or [""] * len(values)
    ss, dof = 0.0, 0
    for m in dict.fromkeys(machines):
        y = transformed([v for v, k in zip(values, machines, strict=True) if k == m], metric)
        if y.size >= 2:
            ss, dof = ss + float(((y - y.mean()) ** 2).sum()), dof + int(y.size) - 1
    if dof < 1:
        return None
    s = math.sqrt(ss / dof)
    p = float(stats.f.sf((s / noise.repetition_sd) ** 2, dof, noise.repetition_dof))
    return Spread(s, dof, p, p)


def adjust_spreads(tests: list[Spread | None]) -> list[Spread | None]:
    """The same tests with ``q``: their p-values adjusted together (Benjamini-Hochberg; None stays None)."""
    done = [t for t in tests if t is not None]
    if not done:
        return list(tests)
    q = iter(stats.false_discovery_control([t.p for t in done], method="bh"))
    return [None if t is None else Spread(t.sd, t.dof, t.p, float(next(q))) for t in tests]


def _power(floor: float, se: float, dof: float) -> float:
    """Chance that a true difference of the floor's size lies beyond the 95% half-width (two-sided t-test)."""
    if not (se > 0 and dof > 0):
        return math.nan
    tc, nc = float(stats.t.ppf(0.975, dof)), floor / se
    return float(stats.nct.sf(tc, dof, nc) + stats.nct.cdf(-tc, dof, nc))


def compare_metric(ref: list[float], rep: list[float], metric: Metric, noise: Noise | None, machines: float = 2.0,
                   no_noise: str = "", on: tuple[list[str], list[str]] | None = None,
                   spreads: tuple[Spread | None, Spread | None] | None = None) -> dict:
    """One metric of one configuration: means, difference, the noise's half-width, tolerance and verdict.

    Args:
        ref, rep: the two sides' repetitions.
        noise: the metric's noise in the configuration's regime (None: ``no_noise`` says why there is none).
        machines: ``c`` of :func:`machine_difference`.
        on: the machine of each repetition of ``ref`` and of ``rep`` (None: one machine per side).
        spreads: the two sides' :class:`Spread` tests adjusted over a whole comparison (:func:`compare`); None: each
            side tested alone.
    """
    r_ci, p_ci = mean_interval(ref), mean_interval(rep)
    row = {"metric": metric.column, "label": metric.label, "unit": metric.unit,
           "reference_mean": r_ci.value, "reference_ci95_low": r_ci.low, "reference_ci95_high": r_ci.high,
           "reference_n": len(ref), "reproduction_mean": p_ci.value, "reproduction_ci95_low": p_ci.low,
           "reproduction_ci95_high": p_ci.high, "reproduction_n": len(rep),
           "difference_unit": "fraction" if metric.relative else metric.unit, "floor": metric.floor,
           "machine_difference": machines}
    if not ref or not rep:
        side = "reference" if not ref else "reproduction"
        return {**row, "verdict": NOT_COMPARABLE, "reason": f"no value of {metric.column} in the {side}"}
    if metric.relative and not (r_ci.value > 0 and p_ci.value > 0):
        return {**row, "verdict": NOT_COMPARABLE, "reason": f"a mean of {metric.column} <= 0: no ratio"}
    d = p_ci.value / r_ci.value - 1 if metric.relative else p_ci.value - r_ci.value
    se, dof, why = noise.difference(len(ref), len(rep), machines) if noise else (math.nan, 0.0, no_noise)
    se *= (1 + d) if metric.relative else 1.0  # log-scale noise carried to the ratio (delta method)
    h = float(stats.t.ppf(0.975, dof)) * se if dof > 0 and math.isfinite(se) else math.nan
    null = 1.0 if metric.relative else 0.0
    effect = Effect(null + d, null + d - h, null + d + h, len(ref) + len(rep),
                    f"noise model ({noise.bound}, {noise.thermal}), {dof:.1f} dof" if noise and not why else why, dof,
                    "repetitions")
    judged = verdict(effect, Claim(sign=0, null=null, tolerance=metric.floor))
    f = metric.floor
    tol = max(f, h) if math.isfinite(h) else f
    if spreads is None:
        spreads = (spread_test(ref, on[0] if on else None, metric, noise),
                   spread_test(rep, on[1] if on else None, metric, noise))
    spread = "; ".join(w for w in (t.why(side, metric, noise) for t, side in zip(spreads, ("reference", "reproduction"),
                                                                                 strict=True) if t and noise) if w)
    if not math.isfinite(h):
        v, reason = CANNOT_TELL, f"{metric.fmt(d)}; no noise to judge it against: {why}"
    elif abs(d) > tol:
        v, reason = NOT_REPRODUCED, (f"{metric.fmt(d)} beyond +-{metric.fmt(tol, False)} ("
                                     + ("the noise's, wider than the floor)" if h > f else
                                        f"the floor; noise +-{metric.fmt(h, False)})"))
    elif h > f:
        v, reason = CANNOT_TELL, (f"{metric.fmt(d)}: the noise (+-{metric.fmt(h, False)}) is wider than the floor "
                                  f"(+-{metric.fmt(f, False)}): a difference of the floor's size cannot be seen")
    elif spread:  # the noise model does not describe these repetitions: neither judgement rests on it
        v, reason = CANNOT_TELL, f"{metric.fmt(d)} within +-{metric.fmt(f, False)}, but {spread}"
        judged = Judgement(CANNOT_SAY, spread)
    else:
        v, reason = REPRODUCED, f"{metric.fmt(d)} within +-{metric.fmt(f, False)} (noise +-{metric.fmt(h, False)})"
    return {**row, "difference": d, "difference_ci95_low": d - h, "difference_ci95_high": d + h,
            "noise_half_width": h, "noise_dof": dof, "power": _power(f, se, dof), "tolerance": tol,
            "noise_regime": f"{noise.bound}, {noise.thermal}" if noise else "", "verdict": v, "reason": reason,
            "interval_verdict": judged.verdict, "interval_why": judged.why}


def _regime_noise(model: NoiseModel, metric: Metric, rows: pd.DataFrame) -> tuple[Noise | None, str]:
    hw = sorted({str(h) for h in rows.get("hardware", pd.Series(dtype=str)).dropna()})
    if model.hardware and hw and not set(hw) <= set(model.hardware):
        return None, f"the noise model has no runs on {', '.join(hw)} (it has {', '.join(model.hardware)})"
    bound = bound_of(busy_share(rows))
    thermal = thermal_regime(thermal_of(rows))
    noise = model.get(metric.column, bound, thermal)
    return noise, "" if noise else f"the noise model has no row for {metric.column}, {bound}, {thermal}"


def compare(reference: Source, reproduction: Source, metrics: tuple[Metric, ...] = METRICS,
            subset: bool = False, noise: NoiseModel | None = None) -> pd.DataFrame:
    """One row per (reference configuration, metric), plus one per reproduction configuration the reference lacks.

    ``subset``: the reproduction measured only some of the reference's configurations on purpose; the others are
    left out instead of reported as missing. ``noise``: the noise model (default: the committed one).
    """
    model = noise if noise is not None else load_noise()
    ref, rep = _configs(reference.runs), _configs(reproduction.runs)
    names_ref, names_rep = _machine_names(reference, reproduction)
    feeds = figure_configs(reference)
    rows: list[dict] = []
    pending: list[tuple[int, tuple, tuple[Spread | None, Spread | None]]] = []  # (row, compare_metric's args, tests)

    def add(cfg: _Config, other: _Config | None, res: list[dict]) -> None:
        r0 = cfg.rows.iloc[0]
        base = {"config_id": cfg.config_id, "reproduction_config_id": other.config_id if other else "",
                "model": r0.get("model"), "hardware": r0.get("hardware"),
                "parallel_label": r0.get("parallel_label"), "optimization_label": r0.get("optimization_label"),
                "micro_batch": r0.get("micro_batch"), "placement": r0.get("placement")}
        for r in res:
            figs = [f for f, cfgs in feeds.items() if cfg.config_id in cfgs and r["metric"] in FIGURE_METRICS[f]]
            rows.append({**base, **r, "figures": ";".join(figs)})

    def not_comparable(reason: str) -> list[dict]:
        return [{"metric": m.column, "label": m.label, "unit": m.unit, "verdict": NOT_COMPARABLE, "reason": reason}
                for m in metrics]

    for key, cfg in ref.items():
        other = rep.get(key)
        kind = str(cfg.rows.iloc[0].get("kind") or DEFAULT_KIND)
        if kind not in kinds_where(trains_model=True):
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
        on_ref, on_rep = _machines_of(cfg.ok, names_ref), _machines_of(other.ok, names_rep)
        c = machine_difference(_shares(on_ref), _shares(on_rep))
        add(cfg, other, [{"metric": m.column} for m in metrics])  # filled in below, once every side is tested
        for i, m in enumerate(metrics):
            nz, why = _regime_noise(model, m, cfg.ok)
            (vr, mr), (vp, mp) = _values(cfg.ok, m.column, on_ref), _values(other.ok, m.column, on_rep)
            pending.append((len(rows) - len(metrics) + i, (vr, vp, m, nz, c, why, (mr, mp)),
                            (spread_test(vr, mr, m, nz), spread_test(vp, mp, m, nz))))
    # every side's spread test of the comparison adjusted together (a false-discovery rate over all of them)
    tests = iter(adjust_spreads([t for *_, pair in pending for t in pair]))
    for at, args, _ in pending:
        rows[at].update(compare_metric(*args, spreads=(next(tests), next(tests))))
    for key, cfg in rep.items():
        if key not in ref and str(cfg.rows.iloc[0].get("kind") or DEFAULT_KIND) in kinds_where(trains_model=True):
            add(cfg, None, not_comparable("not in the reference: nothing to compare with"))
            rows[-len(metrics):] = [{**r, "config_id": "", "reproduction_config_id": cfg.config_id, "figures": ""}
                                    for r in rows[-len(metrics):]]
    cols = ["config_id", "reproduction_config_id", "model", "hardware", "parallel_label", "optimization_label",
            "micro_batch", "placement", "metric", "label", "unit",
            *(f"{side}_{k}" for side in ("reference", "reproduction") for k in ("mean", "ci95_low", "ci95_high", "n")),
            "difference", "difference_unit", "difference_ci95_low", "difference_ci95_high", "floor",
            "noise_half_width", "noise_dof", "noise_regime", "machine_difference", "power", "tolerance", "verdict",
            "reason", "interval_verdict", "interval_why", "figures"]
    return pd.DataFrame(rows).reindex(columns=cols)


def figure_configs(reference: Source) -> dict[str, set[str]]:
    """Figure -> the reference configurations it draws (:data:`FIGURE_METRICS`' figures)."""
    runs = reference.runs
    if runs.empty:
        return {f: set() for f in FIGURE_METRICS}
    cid = dict(zip(runs["cell_id"], config_ids(runs), strict=True))
    plan = runs.to_dict("records")
    out = {}
    for fig in FIGURE_METRICS:
        try:
            cells = figure_cells(fig, plan)
        except Exception:  # noqa: BLE001 - a figure's selection that cannot read old tables counts every cell
            cells = list(cid)
        out[fig] = {cid[c] for c in cells if c in cid}
    return out


def overall(rows: pd.DataFrame) -> str:
    """The verdict of a set of rows (a figure's, or all): see the module's docstring."""
    missing = rows["reason"].fillna("").str.startswith("missing cell") & (rows["config_id"].fillna("") != "")
    comparable = rows[rows["verdict"] != NOT_COMPARABLE]
    if missing.any() or (comparable["verdict"] == NOT_REPRODUCED).any():
        return NOT_REPRODUCED
    if comparable.empty:
        return NOT_COMPARABLE
    return CANNOT_TELL if (comparable["verdict"] == CANNOT_TELL).any() else REPRODUCED


def _widest_noise(rows: pd.DataFrame) -> str:
    """Per metric, the widest noise half-width among the rows (the smallest floor this comparison could judge)."""
    out = []
    by = {m.column: m for m in METRICS}
    for col, g in rows.dropna(subset=["noise_half_width"]).groupby("metric", sort=False):
        m = by.get(str(col))
        if m is not None:
            out.append(f"{col} +-{m.fmt(float(g['noise_half_width'].max()), False)}")
    return "; ".join(out)


def figure_counts(result: pd.DataFrame) -> pd.DataFrame:
    """Per figure (the rows whose ``figures`` name it) and overall: the verdict, the rows per verdict, and the widest
    noise half-width per metric (a floor below it cannot be judged by this comparison)."""
    out = []
    figs = result["figures"].fillna("").str.split(";")
    for fig in [*FIGURE_METRICS, "all"]:
        sub = result if fig == "all" else result[figs.apply(lambda fs, f=fig: f in fs)]
        out.append({"figure": fig, "verdict": overall(sub) if len(sub) else NOT_COMPARABLE,
                    **{v: int((sub["verdict"] == v).sum()) for v in VERDICTS}, "noise": _widest_noise(sub)})
    return pd.DataFrame(out)


def passed(result: pd.DataFrame) -> bool:
    """Every comparable metric reproduced, at least one compared, and no reference configuration missing."""
    return overall(result) == REPRODUCED


def exit_code(result: pd.DataFrame) -> int:
    """``calorimeter compare``'s exit status: :data:`EXIT_CODES` of the overall verdict."""
    return EXIT_CODES[overall(result)]
