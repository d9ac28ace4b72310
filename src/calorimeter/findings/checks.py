"""The computations behind the findings: each turns a sweep's tables into an :class:`Evidence` (an effect with its
interval over units of replication, or why the sweep cannot answer), after screening the cells with the finding's
preconditions (:mod:`calorimeter.findings.preconditions`).

The experimental unit of a comparison between configurations is the repetition on one machine: layouts are
averaged within a repetition, never counted as units of their own, and cells are paired only within a machine
(:func:`calorimeter.findings.select.pair_effect`, :func:`~calorimeter.findings.select.slope_effect`). Claims about
machines (thermal asymmetry, hot GPUs clocking lower) have the machine as their unit (:func:`asymmetry`,
:func:`hot_clock`): cells of one machine are repetitions of that machine's value, not machines of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.findings.preconditions import Precondition, screen, with_note
from calorimeter.findings.select import (
    Config,
    column,
    configs,
    matched,
    min_repeats,
    pair_effect,
    pairs,
    slope_effect,
)
from calorimeter.findings.stats import Effect, mean_interval
from calorimeter.records.legacy import config_ids as config_ids_of
from calorimeter.records.machines import node_machines

Tables = dict[str, pd.DataFrame]
Where = Callable[[pd.DataFrame], pd.Series]

#: sensor steps: NVML reports GPU and HBM temperatures in whole degrees Celsius
TEMP_RESOLUTION_C = 1.0
#: what a cross-hardware cluster comparison varies: the GPU kind and how many of them (the data-parallel degree)
CLUSTER_PARAMS = ("hardware", "nodes", "gpus_per_node", "world_size", "dp")


@dataclass(frozen=True)
class Secondary:
    """Another metric read over the same pairs or slopes as a finding's own, shown in the detail, labelled, never
    judged (a column the tables lack, as in sets built before it existed, shows nothing).

    Attributes:
        column: the runs column.
        label: what the reader is told it is.
        ratio: a / b over each pair (else a - b); a slope is then a factor per doubling.
        inverse: b / a (e.g. tokens per joule from energy per token).
        unit: the unit printed after a difference or a slope.
    """

    column: str
    label: str
    ratio: bool = False
    inverse: bool = False
    unit: str = ""

    def text(self, e: Effect) -> str:
        """``; secondary reading, never judged: <label> <value> [<interval>]`` ("" without a value)."""
        if not math.isfinite(e.value):
            return ""
        fmt = "{:.4g}" if self.ratio else "{:+.3g}"
        ci = f" [{fmt.format(e.low)}, {fmt.format(e.high)}]" if e.has_interval else ""
        unit = "x" if self.ratio else (f" {self.unit}" if self.unit else "")
        return f"; secondary reading, never judged: {self.label} {fmt.format(e.value)}{unit}{ci}"


#: the SM clock under load (docs/telemetry.md), beside every clock comparison
LOADED_CLOCK = Secondary("sm_clock_loaded_avg_mhz", "mean SM clock under load (samples at >= 60% of the power "
                         "limit: a pipeline's bubbles left out)", unit="MHz")


@dataclass
class Evidence:
    """What the sweep says about one finding.

    Attributes:
        estimate: this sweep's effect with its interval (None: nothing to compare).
        scope: which comparisons the number comes from.
        configs: configuration ids used.
        n_repeats: fewest ok repetitions of any configuration used.
        missing: why the sweep cannot answer (the preconditions the cells failed included), empty when it can.
        detail: per-comparison values, for the reader.
        machines: the machines the estimate rests on (their ids, :func:`calorimeter.records.machines.machine_id`,
            or their short names).
        repetitions: how many repetition units it rests on (paired repetitions, slopes, held-out cells), whatever
            the unit of its interval.
        precondition_failed: no comparison is left because the cells failed the finding's preconditions (or the
            claim's regime), not for want of measurements.
    """

    estimate: Effect | None = None
    scope: str = ""
    configs: list[str] = field(default_factory=list)
    n_repeats: int = 0
    missing: str = ""
    detail: str = ""
    machines: list[str] = field(default_factory=list)
    repetitions: int = 0
    precondition_failed: bool = False


def _runs(t: Tables) -> pd.DataFrame:
    return t.get("runs", pd.DataFrame())


def _ids(cfgs: Sequence[Config]) -> list[str]:
    return list(dict.fromkeys(c.config_id for c in cfgs))


def _and(*ws: Where | None) -> Where | None:
    ws = tuple(w for w in ws if w is not None)
    if not ws:
        return None
    return lambda d: pd.concat([w(d).fillna(False).astype(bool) for w in ws], axis=1).all(axis=1)


def _means(prs: list[tuple[Config, Config]], ratio: bool, fmt: str) -> str:
    out = []
    for a, b in prs:
        v = (a.mean / b.mean if ratio else a.mean - b.mean) if b.mean else math.nan
        out.append(f"{a.config_id} vs {b.config_id}: {fmt.format(v)} (repeats {len(a.values)}/{len(b.values)})")
    return "; ".join(out)


def knob(metric: tuple[str, ...], knob_: str, a: Callable[[Any], bool], b: Callable[[Any], bool], what: str,
         missing: str, conds: Sequence[Precondition] = (), where: Where | None = None, ratio: bool = False,
         resolution: float = 0.0, also: Sequence[str] = (), to: Callable[[float], float] | None = None,
         scale: str | None = None, secondary: Secondary | None = None) -> Callable[[Tables], Evidence]:
    """The effect of a knob (side ``a`` - side ``b``, or a / b with ``ratio``) between configurations equal but
    for it (and ``also``), on cells meeting ``conds``; ``to`` maps the effect (e.g. a ratio to a percent change).
    ``secondary``: another metric over the same pairs, in the detail, never judged."""

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        prs = pairs(configs(runs, metric, where=where), knob_, a, b, also=also)
        if not prs:
            return Evidence(missing=with_note(missing, note), precondition_failed=bool(note))
        u = pair_effect(prs, resolution, ratio=ratio)
        est = u.effect if to is None else u.effect.map(to, scale=scale)
        cfgs = [c for p in prs for c in p]
        detail = _means(prs, ratio, "{:.4g}" if ratio else "{:+.3g}")
        if secondary is not None and secondary.column in runs.columns:
            prs2 = pairs(configs(runs, (secondary.column,), where=where), knob_, a, b, also=also)
            prs2 = [(y, x) for x, y in prs2] if secondary.inverse else prs2
            detail += secondary.text(pair_effect(prs2, ratio=secondary.ratio).effect)
        return Evidence(est, f"{len(prs)} pair(s) differing only in {what}" + _left_out(note, u.note()),
                        _ids(cfgs), min_repeats(cfgs), detail=detail, machines=u.machines, repetitions=len(u.used))

    return check


def _left_out(*notes: str) -> str:
    """``; left out: ...`` for the scope column ("" when nothing was left out)."""
    said = [n for n in notes if n]
    return f"; left out: {'; '.join(said)}" if said else ""


def slope(metric: tuple[str, ...], knob_: str, what: str, missing: str, conds: Sequence[Precondition] = (),
          where: Where | None = None, log: bool = False, resolution: float = 0.0,
          hold: Sequence[str] = (), regime: Callable[[list[Config]], bool] | None = None,
          regime_missing: str = "", extra: Callable[[list[Config]], str] | None = None,
          secondary: Secondary | None = None) -> Callable[[Tables], Evidence]:
    """Slope of the metric (a factor per doubling with ``log``) per doubling of ``knob_`` within groups of
    configurations equal but for it (``hold``: the parameters a group may vary besides, e.g. tp with pp);
    ``regime`` keeps the groups the claim is about, and within them each repetition's own cells must meet it too
    (a repetition of a group that lacks the cell that makes it deep is no deep-pipeline slope); ``extra`` adds to the
    detail (e.g. the pipeline bubble); ``secondary``: another metric's slope over the same groups, never judged."""

    def grouped(runs: pd.DataFrame, cols: tuple[str, ...]) -> list[list[Config]]:
        cf = configs(runs, cols, where=where)
        return [g for g in matched(cf, (knob_, *hold)) if len({c.params[knob_] for c in g}) > 1]

    def x(c: Config) -> float:
        return math.log2(c.params[knob_])

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        groups = grouped(runs, metric)
        if groups and regime is not None:
            kept = [g for g in groups if regime(g)]
            if not kept:
                return Evidence(missing=with_note(regime_missing, note), precondition_failed=True)
            groups = kept
        if not groups:
            return Evidence(missing=with_note(missing, note), precondition_failed=bool(note))
        u = slope_effect(groups, x, log=log, resolution=resolution, unit_regime=regime)
        used = [c for g in groups for c in g]
        levels = sorted({c.params[knob_] for c in used})
        detail = "; ".join(f"{c.config_id}: {c.mean:.4g} (repeats {len(c.values)})" for c in used)
        if extra is not None:
            detail = "; ".join(d for d in (detail, extra(used)) if d)
        if secondary is not None and secondary.column in runs.columns:
            g2 = [g for g in grouped(runs, (secondary.column,)) if regime is None or regime(g)]
            if g2:
                per = secondary if secondary.ratio else replace(secondary, unit=f"{secondary.unit}/doubling")
                detail += per.text(slope_effect(g2, x, log=secondary.ratio, unit_regime=regime).effect)
        return Evidence(u.effect, f"{len(groups)} configuration group(s){what} at {knob_} "
                        f"{'/'.join(str(int(v)) for v in levels)}" + _left_out(note, u.note()),
                        _ids(used), min_repeats(used), detail=detail, machines=u.machines, repetitions=len(u.used))

    return check


def _node_gpus(t: Tables, conds: Sequence[Precondition]) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Runs rows meeting ``conds`` of symmetric cells (pp = 1: every GPU does the same work) and their per-GPU rows
    on nodes with two GPUs or more."""
    runs, note = screen(_runs(t), *conds)
    gpus = t.get("gpus", pd.DataFrame())
    if gpus is None or gpus.empty or runs.empty or "temp_avg_c" not in gpus.columns:
        return pd.DataFrame(), pd.DataFrame(), note
    ok = runs[(runs["status"] == "ok") & (column(runs, "pp") == 1)]
    g = gpus[gpus["cell_id"].isin(ok["cell_id"])].copy()
    g = g[np.isfinite(column(g, "temp_avg_c"))]
    if "hostname" not in g.columns:
        g["hostname"] = g["node"].astype(str)
    g["host"] = node_machines(g)
    n = g.groupby(["cell_id", "node"])["gpu_index"].transform("nunique")
    return ok, g[n >= 2], note


def _per_machine(values: dict[str, list[float]], what: str, fmt: str) -> tuple[Effect, str]:
    """The machine-level effect: each machine's mean over its cells, the t-interval over machines (``M - 1``
    degrees of freedom; one machine has none), and each machine's own mean and interval over its cells for the
    reader."""
    est = mean_interval([float(np.mean(v)) for v in values.values()], 0.0, "machines")
    parts = []
    for m, v in values.items():
        own = mean_interval(v, 0.0, what)
        ci = f" [{fmt.format(own.low)}, {fmt.format(own.high)}]" if own.has_interval else ""
        parts.append(f"{m}: {fmt.format(own.value)}{ci} over {len(v)} {what}")
    return est, "; ".join(parts)


def asymmetry(conds: Sequence[Precondition], missing: str) -> Callable[[Tables], Evidence]:
    """(hot - cool) / cool mean GPU temperature of a node in %, the hot and the cool GPU chosen on other cells
    than those measured: per machine, the GPU indices hottest and coolest on average over its repetition-0 cells
    (the first half in time when there are no repetitions), the offset measured on its remaining cells. A machine
    without a lasting offset gives offsets around 0 (a range statistic would be > 0 by construction). The claim is
    about machines: the interval is over machines (each the mean of its held-out cells), never over cells."""

    def check(t: Tables) -> Evidence:
        ok, g, note = _node_gpus(t, conds)
        if g.empty:
            return Evidence(missing=with_note(missing, note), precondition_failed=bool(note))
        order = ok.assign(_t=column(ok, "measured_begin_s"), _r=column(ok, "repeat").fillna(0))
        order = order.sort_values(["_t"]).reset_index(drop=True)
        per: dict[str, list[float]] = {}
        chosen = []
        for host, d in g.groupby("host", sort=False):
            cells = [c for c in order["cell_id"] if c in set(d["cell_id"])]
            reps = order.set_index("cell_id")["_r"]
            pick = [c for c in cells if reps.get(c, 0) == 0] if (reps.reindex(cells) > 0).any() else \
                cells[: len(cells) // 2]
            rest = [c for c in cells if c not in set(pick)]
            if not pick or not rest:
                continue
            mean_t = d[d["cell_id"].isin(pick)].groupby("gpu_index")["temp_avg_c"].mean()
            hot, cool = int(mean_t.idxmax()), int(mean_t.idxmin())
            if hot == cool:
                continue
            chosen.append(f"{host}: GPU {hot} hot, GPU {cool} cool (chosen on {len(pick)} cell(s))")
            for c in rest:
                temp = d[d["cell_id"] == c].set_index("gpu_index")["temp_avg_c"]
                if hot in temp.index and cool in temp.index:
                    per.setdefault(str(host), []).append(float((temp[hot] - temp[cool]) / temp[cool] * 100.0))
        if not per:
            return Evidence(missing=with_note("no machine with two or more steady symmetric cells (one to choose the "
                                              "hot and cool GPU, one to measure them)", note))
        est, own = _per_machine(per, "held-out cell(s)", "{:.2f}")
        n = sum(len(v) for v in per.values())
        return Evidence(est, f"{n} held-out symmetric cell(s) on {len(per)} machine(s): the interval is over "
                        "machines" + _left_out(note), list(dict.fromkeys(g["cell_id"])), 1,
                        detail="; ".join(chosen) + f"; per machine (%): {own}", machines=list(per), repetitions=n)

    return check


def hot_clock(conds: Sequence[Precondition], missing: str) -> Callable[[Tables], Evidence]:
    """Mean SM clock of a node's hottest - its coolest GPU, per symmetric cell; per machine the mean over its
    cells, and the interval over machines (the claim is about GPUs of machines, and cells of one machine repeat
    that machine's value)."""

    def check(t: Tables) -> Evidence:
        _, g, note = _node_gpus(t, conds)
        if g.empty or "sm_clock_avg_mhz" not in g.columns:
            return Evidence(missing=with_note(missing, note), precondition_failed=bool(note))
        per: dict[str, list[float]] = {}
        for (_, _, host), d in g.groupby(["cell_id", "node", "host"], sort=False):
            temp, clock = column(d, "temp_avg_c").to_numpy(), column(d, "sm_clock_avg_mhz").to_numpy()
            if not np.isfinite(clock).all() or temp.max() == temp.min():
                continue
            per.setdefault(str(host), []).append(float(clock[int(np.argmax(temp))] - clock[int(np.argmin(temp))]))
        if not per:
            return Evidence(missing=with_note("no cell whose GPUs differ in temperature and report SM clocks", note))
        est, own = _per_machine(per, "cell(s)", "{:+.1f}")
        n = sum(len(v) for v in per.values())
        return Evidence(est, f"{n} symmetric cell(s) x node on {len(per)} machine(s): hottest - coolest; the "
                        "interval is over machines" + _left_out(note), list(dict.fromkeys(g["cell_id"])), 1,
                        detail=f"per machine (MHz): {own}", machines=list(per), repetitions=n)

    return check


#: kernel-time shares a finding can read (the numerator over the summed kernel time of the traced ranks):
#: ``gemm_attention`` the study's Fig. 10 class "Compute (GEMM/SDPA)" (matrix multiplies and attention kernels),
#: ``non_comm`` every kernel that is not communication, ``comm`` communication kernels
SHARES = {"gemm_attention": "GEMM/attention (the study's 'Compute (GEMM/SDPA)')", "non_comm": "non-communication",
          "comm": "communication"}


def kernel_shares(k: pd.DataFrame, cells: pd.Series, of: str) -> pd.Series:
    """Share ``of`` (a key of :data:`SHARES`) of each cell's summed kernel time, in the order of ``cells``."""
    kk = k[k["cell_id"].isin(cells)]
    tot = kk.groupby("cell_id")["sum_s"].sum()
    comm = kk["is_comm"].astype(bool)
    part = {"comm": comm, "non_comm": ~comm,
            "gemm_attention": kk["category"].astype(str).eq("gemm_attention") if "category" in kk else comm & False}[of]
    num = kk[part].groupby("cell_id")["sum_s"].sum().reindex(tot.index, fill_value=0)
    return (num / tot.where(tot > 0)).reindex(cells).reset_index(drop=True)


def kernel_share(of: str, where: Where, conds: Sequence[Precondition], missing: str, pick_max: bool,
                 secondary: str = "") -> Callable[[Tables], Evidence]:
    """Share ``of`` (:data:`SHARES`) of the summed kernel time of the profiled step (summed over traced ranks, as
    the study's Fig. 10; a share of kernel time, not of the step: idle time is not in it), of the configuration with
    the highest (``pick_max``) or lowest mean share; its interval over that configuration's repetitions on the
    logit scale (it stays in [0, 1]). ``secondary``: another share shown in the detail, labelled, never judged."""

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        k = t.get("kernels", pd.DataFrame())
        if k is None or k.empty or "sum_s" not in k.columns:
            return Evidence(missing="no kernel trace")

        def share(df: pd.DataFrame) -> pd.Series:
            return pd.Series(kernel_shares(k, df["cell_id"], of).to_numpy(), index=df.index)

        cf = configs(runs, share, where=where)
        if not cf:
            return Evidence(missing=with_note(missing, note), precondition_failed=bool(note))
        pick = (max if pick_max else min)(cf, key=lambda c: c.mean)
        detail = "; ".join(f"{c.config_id}: {c.mean:.3f} (repeats {len(c.values)})"
                           for c in sorted(cf, key=lambda c: c.mean))
        if secondary:
            cells = runs.loc[runs["status"].eq("ok") & config_ids_of(runs).eq(pick.config_id), "cell_id"]
            other = mean_interval(kernel_shares(k, cells, secondary).dropna(), 0.0, "repetitions", scale="logit")
            ci = f" [{other.low:.3f}, {other.high:.3f}]" if other.has_interval else ""
            detail += (f"; secondary reading, never judged: {SHARES[secondary]} share of {pick.config_id}: "
                       f"{other.value:.3f}{ci}")
        what = ("highest " if pick_max else "lowest ") + SHARES[of]
        return Evidence(mean_interval(pick.values, 0.0, "repetitions", scale="logit"),
                        f"{what} share of kernel time of {len(cf)} traced configuration(s): {pick.config_id}",
                        [pick.config_id], len(pick.values), detail=detail, machines=_machines_of([pick]),
                        repetitions=len(pick.values))

    return check


def _machines_of(cfgs: Sequence[Config]) -> list[str]:
    """The machines of the ok cells of ``cfgs``."""
    return list(dict.fromkeys(m for c in cfgs for m in c.machines if m))


def _both(t: Tables) -> pd.DataFrame:
    """This sweep's runs and those of the sweeps named under ``compare:``."""
    parts = [d for d in (_runs(t), t.get("compare")) if d is not None and not d.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _absent(t: Tables, both: pd.DataFrame) -> str:
    hw = sorted(set(both["hardware"])) if not both.empty and "hardware" in both.columns else []
    absent = t.get("compare_missing")
    named = (f"; sweep(s) named under compare: without tables yet: {', '.join(absent['sweep'])}"
             if absent is not None and not absent.empty else
             "; name the other sweep under compare:" if len(hw) < 2 else "")
    return f"hardware here: {', '.join(hw) or 'none'}{named}"


def per_gpu_ratio(t: Tables, metric: tuple[str, ...]) -> str:
    """H200 / H100 of a per-GPU metric over identical single-node configurations, for the reader (outside the
    regime of the cluster claims, never a verdict): ``""`` without such a pair."""
    both = _both(t)
    cf = configs(both, metric, where=lambda d: column(d, "nodes") == 1)
    prs = pairs(cf, "hardware", lambda v: v == "h200", lambda v: v == "h100")
    if not prs:
        return ""
    e = pair_effect(prs, ratio=True, in_time=False).effect
    ci = f" [{e.low:.4g}, {e.high:.4g}], {e.dof:.1f} dof" if e.has_interval else " (no interval)"
    return f"single-node H200 / H100 {metric[0]}: {e.value:.4g}{ci} over {len(prs)} configuration(s)"


def cluster_ratio(metric: tuple[str, ...], a_hw: str, b_hw: str, a_gpus_factor: float, missing: str,
                  conds: Sequence[Precondition] = (), where: Where | None = None) -> Callable[[Tables], Evidence]:
    """``a_hw`` / ``b_hw`` of a whole-job metric between configurations equal but for the hardware and the GPU
    count, ``a_hw`` having ``a_gpus_factor`` times the GPUs of ``b_hw`` (1: the same configuration), from this
    sweep and the sweeps named under ``compare:``; Welch's ratio interval over repetitions (two sweeps are not
    paired in time)."""

    def check(t: Tables) -> Evidence:
        both = _both(t)
        runs, note = screen(both, *conds)
        cf = configs(runs, metric, where=where)
        prs = [(a, b) for a, b in pairs(cf, "hardware", lambda v: v == a_hw, lambda v: v == b_hw,
                                        also=CLUSTER_PARAMS[1:])
               if a.params.get("world_size") == a_gpus_factor * b.params.get("world_size", math.nan)]
        extra = per_gpu_ratio(t, metric if metric[0].endswith("per_gpu") or metric[0].startswith("energy")
                              else ("tokens_per_s_per_gpu",))
        if not prs:
            return Evidence(missing=with_note(f"{missing} ({_absent(t, both)})", note), detail=extra,
                            precondition_failed=bool(note))
        u = pair_effect(prs, ratio=True, in_time=False)  # two hardware kinds: machines differ by design
        cfgs = [c for p in prs for c in p]
        return Evidence(u.effect, f"{len(prs)} configuration pair(s) {a_hw} vs {b_hw}", _ids(cfgs), min_repeats(cfgs),
                        detail="; ".join(x for x in (_means(prs, True, "{:.4g}"), extra) if x), machines=u.machines,
                        repetitions=len(u.used))

    return check


def unmeasured(why: str) -> Callable[[Tables], Evidence]:
    """A finding calorimeter cannot measure: always *cannot say*, with why."""
    return lambda t: Evidence(missing=why)


__all__ = ["SHARES", "Evidence", "Tables", "TEMP_RESOLUTION_C", "_and", "asymmetry", "cluster_ratio", "hot_clock",
           "kernel_share", "kernel_shares", "knob", "slope", "unmeasured"]
