"""Which measured configurations a finding compares: configurations that differ only in the compared knob.

A configuration is a cell without its repetition index (``config_id``; the ``cell_id`` of tables written before
repetitions existed). Its measured values are the values of its repetitions with status ``ok``, each with the
machine it ran on (``machine``: its GPUs' UUIDs, :func:`calorimeter.records.machines.machine_id`).

The unit of a comparison is a repetition *on one machine*: cells are paired (or fitted) only within the same
machine and repetition index, never across machines (two machines differ in cooling, clocks and hosts by more than
the effects compared); a cell without a partner on its machine and repetition is left out, and counted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.findings.stats import Effect, mean_interval, welch, within_slope
from calorimeter.plan.cell import id_knobs
from calorimeter.plan.vocabulary import CONFIGURATION
from calorimeter.records.legacy import config_ids

#: parameters that define a configuration (the cell's vocabulary); a comparison holds every one of them fixed but its
#: knob (columns a table does not have are skipped: ``placement``, ``kind`` and ``engine`` are newer)
CONFIG_PARAMS: tuple[str, ...] = CONFIGURATION
#: a parallel layout (what Fig. 4 compares)
LAYOUT_PARAMS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "sequence_parallel", "zero_stage", "pp_split")


def column(df: pd.DataFrame, *names: str) -> pd.Series:
    """The first of ``names`` that ``df`` has, as floats (NaN where none): new and old names of a metric."""
    for n in names:
        if n in df.columns:
            return pd.to_numeric(df[n], errors="coerce")
    return pd.Series(np.nan, index=df.index, dtype=float)


#: a unit of replication: (machine, repetition index); the machine is "" where unknown (no GPU UUIDs)
Unit = tuple[str, int]


@dataclass
class Config:
    """One measured configuration: its parameters (the runs table's :data:`CONFIG_PARAMS` and what its id names
    beyond them, :func:`calorimeter.plan.cell.id_knobs`: a TP overlap mechanism, pipeline schedule or LoRA rank keeps
    two configurations apart) and the metric's value in each ok repetition."""

    config_id: str
    params: dict[str, Any]
    values: list[float] = field(default_factory=list)
    repeats: list[int] = field(default_factory=list)  # the repetition index of each value
    machines: list[str] = field(default_factory=list)  # the machine of each value ("" where unknown)

    def by_repeat(self) -> dict[Unit, float]:
        """Value of each unit: (machine, repetition index)."""
        reps = self.repeats or list(range(len(self.values)))
        machines = self.machines or [""] * len(self.values)
        return {(m, r): v for m, r, v in zip(machines, reps, self.values, strict=False)}

    @property
    def mean(self) -> float:
        """Mean over repetitions."""
        return float(np.mean(self.values)) if self.values else float("nan")


def configs(runs: pd.DataFrame, metric: Sequence[str] | Callable[[pd.DataFrame], pd.Series],
            where: Callable[[pd.DataFrame], pd.Series] | None = None) -> list[Config]:
    """Measured configurations with the metric's per-repetition values (rows not ``ok`` or without a finite
    value are left out). ``metric``: column names (new name first) or a function of the runs rows."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return []
    df = runs[runs["status"] == "ok"]
    if where is not None and not df.empty:
        df = df[where(df).fillna(False).astype(bool)]
    if df.empty:
        return []
    vals = metric(df) if callable(metric) else column(df, *metric)
    rep = pd.to_numeric(df["repeat"], errors="coerce").fillna(0) if "repeat" in df.columns else 0
    machine = df["machine"].fillna("").astype(str) if "machine" in df.columns else ""
    df = df.assign(_v=pd.to_numeric(vals, errors="coerce"), _c=config_ids(df), _r=rep, _m=machine)
    df = df[np.isfinite(df["_v"])]
    params = [p for p in CONFIG_PARAMS if p in df.columns]
    out = []
    for cid, g in df.groupby("_c", sort=False):
        first = g.iloc[0]
        knobs = {p: param_value(first[p]) for p in params} | {k: param_value(v) for k, v in id_knobs(str(cid)).items()}
        out.append(Config(str(cid), knobs, [float(v) for v in g["_v"]],
                          [int(r) for r in g["_r"]], [str(m) for m in g["_m"]]))
    return out


def param_value(v: Any) -> Any:
    """A parameter value hashable and comparable across tables: NaN/None -> None, numpy scalars -> Python, integral
    numbers -> int (a runs table with a missing value stores its integers as floats); the findings' pairs and
    ``calorimeter compare`` match configurations by it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)) and float(v).is_integer():
        return int(v)
    return v.item() if hasattr(v, "item") else v


def matched(cfgs: list[Config], knob: Sequence[str]) -> list[list[Config]]:
    """Groups of configurations equal in every parameter but ``knob`` (groups of one are dropped)."""
    groups: dict[tuple, list[Config]] = {}
    for c in cfgs:
        key = tuple((p, v) for p, v in c.params.items() if p not in knob)
        groups.setdefault(key, []).append(c)
    return [g for g in groups.values() if len(g) > 1]


def pairs(cfgs: list[Config], knob: str, a: Callable[[Any], bool], b: Callable[[Any], bool],
          also: Sequence[str] = ()) -> list[tuple[Config, Config]]:
    """(a, b) pairs of configurations that differ only in ``knob`` (and in ``also``), ``a``/``b`` telling the two
    sides apart by the knob's value; every a-side is paired with every b-side of its group.

    Raises:
        ValueError: ``knob`` or ``also`` names no parameter of a configuration (:data:`CONFIG_PARAMS`).
    """
    unknown = [p for p in (knob, *also) if p not in CONFIG_PARAMS]
    if unknown:
        raise ValueError(f"{unknown} name no parameter of a configuration (known: {', '.join(CONFIG_PARAMS)})")
    out = []
    for g in matched(cfgs, (knob, *also)):
        sa = [c for c in g if a(c.params.get(knob))]
        sb = [c for c in g if b(c.params.get(knob))]
        out += [(x, y) for x in sa for y in sb]
    return out


#: why a cell is left out of a comparison of units
NO_PARTNER = "without a partner on the same machine and repetition"


@dataclass
class Units:
    """An effect over units of replication, with the units it rests on and what was left out.

    Attributes:
        effect: the effect and its interval.
        used: the (machine, repetition) units the interval is over.
        dropped: cells left out for want of a partner on their machine and repetition.
        dropped_why: why they were left out, for the reader.
    """

    effect: Effect
    used: list[Unit] = field(default_factory=list)
    dropped: int = 0
    dropped_why: str = f"{NO_PARTNER} (pairs never cross machines)"

    @property
    def machines(self) -> list[str]:
        """The machines of the units used, in order of first use."""
        return list(dict.fromkeys(m for m, _ in self.used))

    def note(self) -> str:
        """What was left out, for the reader ("" when nothing was)."""
        return f"{self.dropped} cell(s) {self.dropped_why}" if self.dropped else ""


def _dropped(cfgs: Sequence[Config], used: set[Unit]) -> int:
    """Cells of ``cfgs`` whose unit is not among ``used``."""
    cells = {(c.config_id, k) for c in cfgs for k in c.by_repeat()}
    return sum(1 for _, k in cells if k not in used)


def pair_effect(prs: list[tuple[Config, Config]], resolution: float = 0.0, ratio: bool = False,
                in_time: bool = True) -> Units:
    """The effect of a knob (a - b; with ``ratio`` a / b) over configuration pairs, with the repetition on one
    machine as the experimental unit.

    * Paired (``in_time``: repetitions are interleaved, repetition k of every configuration in the same pass): one
      number per unit (machine, repetition index) that both sides of a pair ran, the mean over the pairs of a - b
      (of log a - log b with ``ratio``), and its t-interval over those units (``U - 1`` degrees of freedom; the
      layouts are averaged within a unit, never counted as units of their own). A cell whose machine and repetition
      its partner lacks is left out (pairs never cross machines).
    * Without a common unit in any pair (repetitions that do not line up) but all on one machine: Welch's interval
      between the two sides' repetitions. Cells of several machines without common units: no effect.
    * Without ``in_time`` (two sweeps of two hardware kinds, whose machines differ by design): Welch's interval
      between the two sides, per repetition index the mean over the pairs of each side.
    """
    if not prs:
        return Units(Effect(float("nan"), method="no pair", unit="repetitions"))
    f = np.log if ratio else (lambda x: x)
    by_a, by_b = [a.by_repeat() for a, _ in prs], [b.by_repeat() for _, b in prs]
    cfgs = [c for p in prs for c in p]
    common = [set(ra) & set(rb) for ra, rb in zip(by_a, by_b, strict=True)]
    if in_time and any(common):
        per_rep: dict[Unit, list[float]] = {}
        for ra, rb, both in zip(by_a, by_b, common, strict=True):
            for k in sorted(both):
                if ratio and (ra[k] <= 0 or rb[k] <= 0):
                    continue
                per_rep.setdefault(k, []).append(float(f(ra[k]) - f(rb[k])))
        d = [float(np.mean(v)) for v in per_rep.values()]
        used = list(per_rep)
        what = f"repetitions (each the mean over {len(prs)} pair(s))" if len(prs) > 1 else "paired repetitions"
        if ratio:  # mean log ratio, carried back: a ratio with its interval above 0
            est = mean_interval(d, 0.0, what).map(math.exp, scale="log")
        else:
            est = mean_interval(d, resolution * np.sqrt(2 / len(prs)), what)  # quantization of a mean of differences
        return Units(est, used, _dropped(cfgs, set(used)))
    machines = {m for c in cfgs for m, _ in c.by_repeat()}
    if in_time and len(machines) > 1:
        return Units(Effect(float("nan"), method="no machine and repetition that both sides of a pair ran (pairs "
                            "never cross machines)", unit="repetitions"), [], _dropped(cfgs, set()))
    side_a, side_b = _side(by_a, ratio), _side(by_b, ratio)
    unit = f"repetitions (each the mean over {len(prs)} configuration(s))" if len(prs) > 1 else "repetitions"
    used = list(dict.fromkeys(k for r in by_a + by_b for k in r))
    return Units(welch(side_a, side_b, ratio=ratio, resolution=resolution, unit=unit), used)


def _side(by_rep: list[dict[Unit, float]], ratio: bool) -> list[float]:
    """Per unit, the mean over configurations (geometric with ``ratio``) of one side of the pairs."""
    per: dict[Unit, list[float]] = {}
    for r in by_rep:
        for k, v in r.items():
            if not ratio or v > 0:
                per.setdefault(k, []).append(float(np.log(v)) if ratio else float(v))
    return [float(np.exp(np.mean(v))) if ratio else float(np.mean(v)) for v in per.values()]


def slope_effect(groups: list[list[Config]], x: Callable[[Config], float], log: bool = False,
                 resolution: float = 0.0, unit_regime: Callable[[list[Config]], bool] | None = None) -> Units:
    """Slope of the metric (of ``log2`` of it with ``log``, then carried back as a factor ``2**slope``) on ``x`` of
    each configuration, within groups (one intercept per group), with the repetition on one machine as the
    experimental unit: one slope per unit (machine, repetition index) where a group ran two or more ``x`` values,
    and the t-interval over those slopes (``U - 1`` degrees of freedom). Misfit of the straight line goes into the
    mean, not the interval; cells of a unit without a second ``x`` value are left out, and with ``unit_regime``
    those of a unit whose own configurations of a group fall outside the claim's regime (a repetition that measured
    TP4 and TP2-PP2 but lost its PP4 cell estimates a shallower slope than the one a deep-pipeline claim is about).
    """
    keys = sorted({k for g in groups for c in g for k in c.by_repeat()})
    slopes, sxx, used = [], [], []
    for k in keys:
        pts = []
        for g in groups:
            mine = [c for c in g if k in c.by_repeat() and (not log or c.by_repeat()[k] > 0)]
            have = [(x(c), c.by_repeat()[k]) for c in mine]
            if len({p for p, _ in have}) >= 2 and (unit_regime is None or unit_regime(mine)):
                xs = np.array([p for p, _ in have])
                ys = np.array([np.log2(v) if log else v for _, v in have])
                pts.append((xs, ys))
        if pts:
            s = within_slope(pts)
            if np.isfinite(s.value):
                slopes.append(s.value)
                sxx.append(sum(float(((xs - xs.mean()) ** 2).sum()) for xs, _ in pts))
                used.append(k)
    # a quantized sensor adds resolution**2 / 12 / Sxx to each slope's variance
    q = resolution / np.sqrt(np.mean(sxx)) if sxx and not log else 0.0
    est = mean_interval(slopes, q, f"repetitions (each a slope within {len(groups)} group(s))")
    est = est.map(lambda v: 2.0**v, scale="log") if log else est
    why = NO_PARTNER + (", or of a repetition whose own cells fall outside the claim's regime"
                        if unit_regime is not None else "")
    return Units(est, used, _dropped([c for g in groups for c in g], set(used)), why + " (slopes never cross machines)")


def min_repeats(cfgs: Sequence[Config]) -> int:
    """Fewest ok repetitions of any of the configurations (0 without any)."""
    return min((len(c.values) for c in cfgs), default=0)


def describe(prs: list[tuple[Config, Config]], fmt: str = "{:.3g}") -> str:
    """``a_id - b_id: value`` of each pair, for the evidence column."""
    return "; ".join(f"{a.config_id} vs {b.config_id}: " + fmt.format(a.mean - b.mean) for a, b in prs)
