"""Which measured configurations a finding compares: configurations that differ only in the compared knob.

A configuration is a cell without its repetition index (``config_id``; the ``cell_id`` of tables written before
repetitions existed). Its measured values are the values of its repetitions with status ``ok``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.findings.stats import Estimate, mean_interval, welch_difference
from calorimeter.records.legacy import config_ids

#: parameters that define a configuration; a comparison holds every one of them fixed but its knob
#: (columns a table does not have are skipped: ``placement``, ``kind`` and ``engine`` are newer)
CONFIG_PARAMS: tuple[str, ...] = (
    "model", "hardware", "nodes", "gpus_per_node", "world_size", "tp", "pp", "dp", "ep", "cp", "sequence_parallel",
    "zero_stage", "recompute", "recompute_layers", "overlap", "micro_batch", "global_batch", "seq_len", "precision",
    "pp_split", "placement", "kind", "engine",
)  # fmt: skip
#: a parallel layout (what Fig. 4 compares)
LAYOUT_PARAMS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "sequence_parallel", "zero_stage", "pp_split")


def column(df: pd.DataFrame, *names: str) -> pd.Series:
    """The first of ``names`` that ``df`` has, as floats (NaN where none): new and old names of a metric."""
    for n in names:
        if n in df.columns:
            return pd.to_numeric(df[n], errors="coerce")
    return pd.Series(np.nan, index=df.index, dtype=float)


@dataclass
class Config:
    """One measured configuration: its parameters and the metric's value in each ok repetition."""

    config_id: str
    params: dict[str, Any]
    values: list[float] = field(default_factory=list)
    repeats: list[int] = field(default_factory=list)  # the repetition index of each value

    def by_repeat(self) -> dict[int, float]:
        """Value of each repetition index."""
        return dict(zip(self.repeats or range(len(self.values)), self.values, strict=False))

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
    df = df.assign(_v=pd.to_numeric(vals, errors="coerce"), _c=config_ids(df), _r=rep)
    df = df[np.isfinite(df["_v"])]
    params = [p for p in CONFIG_PARAMS if p in df.columns]
    out = []
    for cid, g in df.groupby("_c", sort=False):
        first = g.iloc[0]
        out.append(Config(str(cid), {p: _norm(first[p]) for p in params}, [float(v) for v in g["_v"]],
                          [int(r) for r in g["_r"]]))
    return out


def _norm(v: Any) -> Any:
    """Hashable, comparable parameter value (NaN/None -> None, numpy scalars -> Python)."""
    if v is None or (isinstance(v, float) and v != v):
        return None
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
    sides apart by the knob's value; every a-side is paired with every b-side of its group."""
    out = []
    for g in matched(cfgs, (knob, *also)):
        sa = [c for c in g if a(c.params.get(knob))]
        sb = [c for c in g if b(c.params.get(knob))]
        out += [(x, y) for x in sa for y in sb]
    return out


def pair_effect(prs: list[tuple[Config, Config]], resolution: float = 0.0,
                transform: Callable[[np.ndarray], np.ndarray] | None = None) -> Estimate:
    """Mean of (a - b) over the pairs, with its 95% interval.

    Each pair contributes one difference per repetition index both sides have (repetitions are interleaved in time:
    repetition k of every configuration ran in the same pass, so its differences are paired); the interval is a
    t-interval over all those differences. A pair whose sides share no repetition index contributes the
    difference of its means; a single pair without common indices gets Welch's interval over its repetitions.
    ``transform`` (e.g. ``np.log``) is applied to the values first (then the effect is a log ratio).
    """
    f = transform or (lambda x: x)
    if not prs:
        return Estimate(float("nan"), method="no pair")
    diffs: list[float] = []
    paired = 0
    for a, b in prs:
        ra, rb = a.by_repeat(), b.by_repeat()
        common = sorted(set(ra) & set(rb))
        if common:
            diffs += [float(f(np.asarray(ra[k])) - f(np.asarray(rb[k]))) for k in common]
            paired += 1
        else:
            diffs.append(float(np.mean(f(np.asarray(a.values))) - np.mean(f(np.asarray(b.values)))))
    if len(prs) == 1 and not paired:
        a, b = prs[0]
        return welch_difference(f(np.asarray(a.values)), f(np.asarray(b.values)), resolution)
    what = f"differences ({len(prs)} pair(s) x repetitions)" if len(diffs) > len(prs) else "pairs"
    return mean_interval(diffs, resolution * np.sqrt(2), what)  # a difference of two quantized readings


def min_repeats(cfgs: Sequence[Config]) -> int:
    """Fewest ok repetitions of any of the configurations (0 without any)."""
    return min((len(c.values) for c in cfgs), default=0)


def describe(prs: list[tuple[Config, Config]], fmt: str = "{:.3g}") -> str:
    """``a_id - b_id: value`` of each pair, for the evidence column."""
    return "; ".join(f"{a.config_id} vs {b.config_id}: " + fmt.format(a.mean - b.mean) for a, b in prs)
