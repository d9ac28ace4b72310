"""The computations behind the findings: each turns a sweep's tables into an :class:`Evidence` (an effect with its
interval over repetitions, or why the sweep cannot answer), after screening the cells with the finding's
preconditions (:mod:`calorimeter.findings.preconditions`).

The experimental unit is the repetition: layouts are averaged within a repetition, never counted as units of their
own (:func:`calorimeter.findings.select.pair_effect`, :func:`~calorimeter.findings.select.slope_effect`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

Tables = dict[str, pd.DataFrame]
Where = Callable[[pd.DataFrame], pd.Series]

#: sensor steps: NVML reports GPU and HBM temperatures in whole degrees Celsius
TEMP_RESOLUTION_C = 1.0
#: what a cross-hardware cluster comparison varies: the GPU kind and how many of them (the data-parallel degree)
CLUSTER_PARAMS = ("hardware", "nodes", "gpus_per_node", "world_size", "dp")


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
    """

    estimate: Effect | None = None
    scope: str = ""
    configs: list[str] = field(default_factory=list)
    n_repeats: int = 0
    missing: str = ""
    detail: str = ""


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
         scale: str | None = None) -> Callable[[Tables], Evidence]:
    """The effect of a knob (side ``a`` - side ``b``, or a / b with ``ratio``) between configurations equal but
    for it (and ``also``), on cells meeting ``conds``; ``to`` maps the effect (e.g. a ratio to a percent change)."""

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        prs = pairs(configs(runs, metric, where=where), knob_, a, b, also=also)
        if not prs:
            return Evidence(missing=with_note(missing, note))
        est = pair_effect(prs, resolution, ratio=ratio)
        if to is not None:
            est = est.map(to, scale=scale)
        cfgs = [c for p in prs for c in p]
        return Evidence(est, f"{len(prs)} pair(s) differing only in {what}" + (f"; left out: {note}" if note else ""),
                        _ids(cfgs), min_repeats(cfgs), detail=_means(prs, ratio, "{:.4g}" if ratio else "{:+.3g}"))

    return check


def slope(metric: tuple[str, ...], knob_: str, what: str, missing: str, conds: Sequence[Precondition] = (),
          where: Where | None = None, log: bool = False, resolution: float = 0.0,
          hold: Sequence[str] = (), regime: Callable[[list[Config]], bool] | None = None,
          regime_missing: str = "") -> Callable[[Tables], Evidence]:
    """Slope of the metric (a factor per doubling with ``log``) per doubling of ``knob_`` within groups of
    configurations equal but for it (``hold``: the parameters a group may vary besides, e.g. tp with pp);
    ``regime`` keeps the groups the claim is about."""

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        cf = configs(runs, metric, where=where)
        groups = [g for g in matched(cf, (knob_, *hold)) if len({c.params[knob_] for c in g}) > 1]
        if groups and regime is not None:
            kept = [g for g in groups if regime(g)]
            if not kept:
                return Evidence(missing=with_note(regime_missing, note))
            groups = kept
        if not groups:
            return Evidence(missing=with_note(missing, note))
        est = slope_effect(groups, lambda c: math.log2(c.params[knob_]), log=log, resolution=resolution)
        used = [c for g in groups for c in g]
        levels = sorted({c.params[knob_] for c in used})
        detail = "; ".join(f"{c.config_id}: {c.mean:.4g} (repeats {len(c.values)})" for c in used)
        return Evidence(est, f"{len(groups)} configuration group(s){what} at {knob_} "
                        f"{'/'.join(str(int(v)) for v in levels)}" + (f"; left out: {note}" if note else ""),
                        _ids(used), min_repeats(used), detail=detail)

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
    g["host"] = physical_hosts(g)
    n = g.groupby(["cell_id", "node"])["gpu_index"].transform("nunique")
    return ok, g[n >= 2], note


def physical_hosts(gpus: pd.DataFrame) -> pd.Series:
    """The physical machine of each per-GPU row: the cells' nodes that share a GPU (by NVML UUID) are one machine.

    Hostnames alone do not tell machines apart: lent and containerised nodes often share one (every lent GPU
    machine here is called ``vm``), so two device sessions on two machines would read as one host. Each connected
    set of (cell, node) GPU groups that share a UUID is one host, named by its hostname (with ``#2``, ``#3``, ...
    where one hostname covers several machines); rows without UUIDs fall back to the hostname."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    host = gpus["hostname"].astype(str)
    if "uuid" not in gpus.columns:
        return host
    has = gpus["uuid"].notna() & (gpus["uuid"].astype(str) != "")
    if not has.any():
        return host
    groups, g_ix = pd.factorize(gpus.loc[has, "cell_id"].astype(str) + "|" + gpus.loc[has, "node"].astype(str))
    uuids, u_ix = pd.factorize(gpus.loc[has, "uuid"].astype(str))
    n = len(g_ix) + len(u_ix)  # graph nodes: the (cell, node) groups, then the UUIDs; an edge per row
    graph = coo_matrix((np.ones(len(groups)), (groups, len(g_ix) + uuids)), shape=(n, n))
    machine = pd.Series(connected_components(graph, directed=False)[1][groups], index=has[has].index)
    nth = machine.groupby(host[has]).transform(lambda m: pd.factorize(m)[0])  # 0, 1, ... per hostname, by appearance
    return host.where(~has, host[has] + nth.map(lambda k: "" if k == 0 else f"#{k + 1}"))


def asymmetry(conds: Sequence[Precondition], missing: str) -> Callable[[Tables], Evidence]:
    """(hot - cool) / cool mean GPU temperature of a node in %, the hot and the cool GPU chosen on other cells
    than those measured: per host, the GPU indices hottest and coolest on average over the repetition-0 cells (the
    first half in time when there are no repetitions), the offset measured on the remaining cells. A host without
    a lasting offset gives offsets around 0 (a range statistic would be > 0 by construction)."""

    def check(t: Tables) -> Evidence:
        ok, g, note = _node_gpus(t, conds)
        if g.empty:
            return Evidence(missing=with_note(missing, note))
        order = ok.assign(_t=column(ok, "measured_begin_s"), _r=column(ok, "repeat").fillna(0))
        order = order.sort_values(["_t"]).reset_index(drop=True)
        offsets, hosts, chosen = [], set(), []
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
            hosts.add(host)
            chosen.append(f"{host}: GPU {hot} hot, GPU {cool} cool (chosen on {len(pick)} cell(s))")
            for c in rest:
                temp = d[d["cell_id"] == c].set_index("gpu_index")["temp_avg_c"]
                if hot in temp.index and cool in temp.index:
                    offsets.append(float((temp[hot] - temp[cool]) / temp[cool] * 100.0))
        if not offsets:
            return Evidence(missing=with_note("no host with two or more steady symmetric cells (one to choose the hot "
                                              "and cool GPU, one to measure them)", note))
        est = mean_interval(offsets, 0.0, f"held-out cells of {len(hosts)} host(s)")
        return Evidence(est, f"{len(offsets)} held-out symmetric cell(s) on {len(hosts)} host(s): this host's offset, "
                        "not HGX nodes in general" + (f"; left out: {note}" if note else ""),
                        list(dict.fromkeys(g["cell_id"])), 1,
                        detail="; ".join(chosen) + f"; offsets {', '.join(f'{o:.1f}' for o in offsets)} %")

    return check


def hot_clock(conds: Sequence[Precondition], missing: str) -> Callable[[Tables], Evidence]:
    """Mean SM clock of a node's hottest - its coolest GPU, per symmetric cell; interval over cells (repetitions)."""

    def check(t: Tables) -> Evidence:
        _, g, note = _node_gpus(t, conds)
        if g.empty or "sm_clock_avg_mhz" not in g.columns:
            return Evidence(missing=with_note(missing, note))
        diffs = []
        for _, d in g.groupby(["cell_id", "node"], sort=False):
            temp, clock = column(d, "temp_avg_c").to_numpy(), column(d, "sm_clock_avg_mhz").to_numpy()
            if not np.isfinite(clock).all() or temp.max() == temp.min():
                continue
            diffs.append(float(clock[int(np.argmax(temp))] - clock[int(np.argmin(temp))]))
        if not diffs:
            return Evidence(missing=with_note("no cell whose GPUs differ in temperature and report SM clocks", note))
        return Evidence(mean_interval(diffs, 0.0, "cells (repetitions)"),
                        f"{len(diffs)} symmetric cell(s) x node: hottest - coolest" + (f"; left out: {note}"
                                                                                        if note else ""),
                        list(dict.fromkeys(g["cell_id"])), 1,
                        detail="; ".join(f"{x:+.0f}" for x in diffs) + " MHz")

    return check


def kernel_share(comm: bool, where: Where, conds: Sequence[Precondition], missing: str,
                 pick_max: bool) -> Callable[[Tables], Evidence]:
    """Kernel-time share of the profiled step (summed over traced ranks, as the study's Fig. 10), communication
    (``comm``) or compute, of the configuration with the highest (``pick_max``) or lowest mean share; its
    interval over that configuration's repetitions on the logit scale (it stays in [0, 1])."""

    def check(t: Tables) -> Evidence:
        runs, note = screen(_runs(t), *conds)
        k = t.get("kernels", pd.DataFrame())
        if k is None or k.empty or "sum_s" not in k.columns:
            return Evidence(missing="no kernel trace")

        def share(df: pd.DataFrame) -> pd.Series:
            kk = k[k["cell_id"].isin(df["cell_id"])]
            tot = kk.groupby("cell_id")["sum_s"].sum()
            c = kk[kk["is_comm"].astype(bool)].groupby("cell_id")["sum_s"].sum().reindex(tot.index, fill_value=0)
            s = ((c if comm else tot - c) / tot.where(tot > 0)).reindex(df["cell_id"])
            return pd.Series(s.to_numpy(), index=df.index)

        cf = configs(runs, share, where=where)
        if not cf:
            return Evidence(missing=with_note(missing, note))
        pick = (max if pick_max else min)(cf, key=lambda c: c.mean)
        detail = "; ".join(f"{c.config_id}: {c.mean:.3f} (repeats {len(c.values)})"
                           for c in sorted(cf, key=lambda c: c.mean))
        what = ("highest" if pick_max else "lowest") + (" communication" if comm else " compute")
        return Evidence(mean_interval(pick.values, 0.0, "repetitions", scale="logit"),
                        f"{what} share of {len(cf)} traced configuration(s): {pick.config_id}", [pick.config_id],
                        len(pick.values), detail=detail)

    return check


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
    e = pair_effect(prs, ratio=True, in_time=False)
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
            return Evidence(missing=with_note(f"{missing} ({_absent(t, both)})", note), detail=extra)
        est = pair_effect(prs, ratio=True, in_time=False)  # two machines: repetitions are not paired in time
        cfgs = [c for p in prs for c in p]
        return Evidence(est, f"{len(prs)} configuration pair(s) {a_hw} vs {b_hw}", _ids(cfgs), min_repeats(cfgs),
                        detail="; ".join(x for x in (_means(prs, True, "{:.4g}"), extra) if x))

    return check


def unmeasured(why: str) -> Callable[[Tables], Evidence]:
    """A finding calorimeter cannot measure: always *cannot say*, with why."""
    return lambda t: Evidence(missing=why)


__all__ = ["Evidence", "Tables", "TEMP_RESOLUTION_C", "_and", "asymmetry", "cluster_ratio", "hot_clock", "knob",
           "kernel_share", "slope", "unmeasured"]
