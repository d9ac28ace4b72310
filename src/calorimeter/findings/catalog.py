"""The study's findings, each as a computed check on a sweep's tables.

Each ``Finding`` carries the study's statement and number with their provenance tags (shared notes
``paper-findings.md``: [A] artifact, [Abs] abstract, [S1]-[S5] secondary sources, [I] inference) and a check
that turns the sweep's tables into an ``Evidence``: an estimate with its 95% interval over the configurations that
differ only in the compared knob, or the reason why the sweep cannot answer and what it would need.

"Throttling" is read, as in the study's figures, from the mean SM clock over the measured steps (a lower clock is
more throttling); peak temperature and power are the maximum over the cell's GPUs of each GPU's peak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from calorimeter.findings.select import (
    LAYOUT_PARAMS,
    Config,
    column,
    configs,
    describe,
    matched,
    min_repeats,
    pair_effect,
    pairs,
)
from calorimeter.findings.stats import Estimate, mean_interval, within_slope
from calorimeter.plan.models import CATALOGUE

Tables = dict[str, pd.DataFrame]

#: time share with NVML's software power cap reason set (new and old column names)
POWER_CAP = ("throttle_sw_power_cap_frac", "throttle_sw_power_cap")
#: sensor steps: NVML reports GPU and HBM temperatures in whole degrees Celsius
TEMP_RESOLUTION_C = 1.0
#: the clock tolerance of "no throttling effect": one SM clock step of Hopper (15 MHz)
CLOCK_TOLERANCE_MHZ = 15.0
#: what a tp x pp layout comparison varies (the data-parallel degree stays fixed)
TP_PP_PARAMS = tuple(p for p in LAYOUT_PARAMS if p != "dp")


@dataclass
class Evidence:
    """What the sweep says about one finding.

    Attributes:
        estimate: this sweep's number with its interval (None: nothing to compare).
        scope: which comparisons the number comes from.
        configs: configuration ids used.
        n_repeats: fewest ok repetitions of any configuration used.
        missing: why the sweep cannot answer, and what measurement would (empty when it can).
        detail: per-comparison values, for the reader.
    """

    estimate: Estimate | None = None
    scope: str = ""
    configs: list[str] = field(default_factory=list)
    n_repeats: int = 0
    missing: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Finding:
    """One finding of the study and its check.

    Attributes:
        id: short stable name (``findings.csv``'s key).
        claim: the study's statement.
        study_value: the study's number, or what is known of it.
        provenance: source tags (see the module docstring).
        figure: the study's figure or section.
        metric: what this sweep's number measures.
        unit: unit of this sweep's number.
        sign: +1 if the claim is "above ``threshold``", -1 if "below".
        threshold: the value the claim is about (0 for a difference, 1 for a ratio).
        tolerance: an interval entirely within ``threshold +- tolerance`` shows no effect of the claimed kind.
        check: the computation on the sweep's tables (``runs``, ``gpus``, ``kernels``, and ``compare``: the runs
            tables of the sweeps the configuration names for cross-sweep findings).
        needs: what the study's setting has that one node does not (said when the sweep cannot answer).
        study_number: the study's number on this metric's scale where it states one beyond the direction (the
            verdict is on ``threshold``; ``why`` says when the whole interval misses this number).
    """

    id: str
    claim: str
    study_value: str
    provenance: str
    figure: str
    metric: str
    unit: str
    sign: int
    check: Callable[[Tables], Evidence]
    threshold: float = 0.0
    tolerance: float = 0.0
    needs: str = ""
    study_number: float = math.nan


# ---------------------------------------------------------------------------------------------------------------
# helpers


def _runs(t: Tables) -> pd.DataFrame:
    return t.get("runs", pd.DataFrame())


def _ids(prs: list[tuple[Config, Config]]) -> list[str]:
    return list(dict.fromkeys(c.config_id for p in prs for c in p))


def _paired(prs: list[tuple[Config, Config]], what: str, resolution: float = 0.0, fmt: str = "{:+.3g}",
            needs: str = "") -> Evidence:
    if not prs:
        return Evidence(missing=needs)
    cfgs = [c for p in prs for c in p]
    return Evidence(pair_effect(prs, resolution), f"{len(prs)} pair(s) differing only in {what}", _ids(prs),
                    min_repeats(cfgs), detail=describe(prs, fmt))


def overlap_effective(df: pd.DataFrame) -> pd.Series:
    """Rows where ``overlap`` changes anything (docs/knobs.md): ZeRO's overlapped reduction and prefetch need dp > 1;
    the tensor-parallel overlap needs tp > 1 with sequence parallelism."""
    sp = df["sequence_parallel"].fillna(False).astype(bool) if "sequence_parallel" in df.columns else False
    return ((column(df, "zero_stage") >= 1) & (column(df, "dp") > 1)) | ((column(df, "tp") > 1) & sp)


def _is_moe(df: pd.DataFrame) -> pd.Series:
    return df["model"].map(lambda m: CATALOGUE[m].is_moe if m in CATALOGUE else "mixtral" in str(m))


# ---------------------------------------------------------------------------------------------------------------
# checks


def _overlap(metric: tuple[str, ...], resolution: float = 0.0) -> Callable[[Tables], Evidence]:
    def check(t: Tables) -> Evidence:
        cf = configs(_runs(t), metric, where=overlap_effective)
        prs = pairs(cf, "overlap", lambda v: bool(v), lambda v: not bool(v))
        return _paired(prs, "overlap (on - off)", resolution, needs="no overlap on/off pair of a configuration "
                       "where overlap acts (ZeRO with dp > 1, or tp > 1 with sequence parallelism)")

    return check


def _recompute_clock(where: Callable[[pd.DataFrame], pd.Series], layouts: str) -> Callable[[Tables], Evidence]:
    def check(t: Tables) -> Evidence:
        cf = configs(_runs(t), ("sm_clock_avg_mhz",), where=where)
        prs = pairs(cf, "recompute", lambda v: v == "full", lambda v: v == "none", also=("recompute_layers",))
        return _paired(prs, "recompute (full - none)", needs=f"no recompute full/none pair of a {layouts} layout")

    return check


def _mb_slope(metric: tuple[str, ...], resolution: float = 0.0, log: bool = False,
              where: Callable[[pd.DataFrame], pd.Series] | None = None, what: str = "") -> Callable[[Tables], Evidence]:
    """Slope of the metric per doubling of the micro-batch, within configurations equal but for micro-batch."""

    def check(t: Tables) -> Evidence:
        cf = configs(_runs(t), metric, where=where)
        groups = [g for g in matched(cf, ("micro_batch",)) if len({c.params["micro_batch"] for c in g}) > 1]
        if not groups:
            return Evidence(missing=f"no configuration{what} measured at two or more micro-batch sizes")
        pts = []
        for g in groups:
            x = np.concatenate([np.full(len(c.values), math.log2(c.params["micro_batch"])) for c in g])
            y = np.concatenate([np.log2(c.values) if log else np.asarray(c.values) for c in g])
            pts.append((x, y))
        est = within_slope(pts, resolution)
        if log:
            est = est.map(lambda v: 2.0**v)
        mbs = sorted({int(c.params["micro_batch"]) for g in groups for c in g})
        used = [c for g in groups for c in g]
        return Evidence(est, f"{len(groups)} configuration(s){what} at micro-batch {'/'.join(map(str, mbs))}",
                        [c.config_id for c in used], min_repeats(used))

    return check


def _layout_depth_clock(t: Tables) -> Evidence:
    """Slope of the mean SM clock per doubling of pipeline depth across tp x pp layouts of one model (dense
    ZeRO-0/1 layouts; everything else fixed, the data-parallel degree included: the claim trades tensor for
    pipeline parallelism, so a pp = 1 layout that is data-parallel instead of TP-heavy is no baseline for it)."""
    cf = configs(_runs(t), ("sm_clock_avg_mhz",),
                 where=lambda d: (column(d, "zero_stage") < 3) & (column(d, "ep") <= 1))
    groups = [g for g in matched(cf, TP_PP_PARAMS) if len({c.params["pp"] for c in g}) > 1]
    if not groups:
        return Evidence(missing="no model measured over two or more pipeline depths (tp x pp layouts of one node or "
                        "more, everything else fixed)")
    pts = [(np.concatenate([np.full(len(c.values), math.log2(c.params["pp"])) for c in g]),
            np.concatenate([np.asarray(c.values) for c in g])) for g in groups]
    used = [c for g in groups for c in g]
    cap = {c.config_id: c.mean for c in configs(_runs(t), POWER_CAP)}
    detail = "; ".join(f"{c.config_id}: {c.mean:.0f} MHz" + (f" (power cap {cap[c.config_id]:.0%} of the time)"
                                                            if c.config_id in cap else "") for c in used)
    depth = sorted({int(c.params["pp"]) for c in used})
    return Evidence(within_slope(pts), f"{len(groups)} group(s) of layouts at pp {'/'.join(map(str, depth))}",
                    [c.config_id for c in used], min_repeats(used), detail=detail)


def _node_gpus(t: Tables) -> pd.DataFrame:
    """Per-GPU rows of symmetric cells (pp = 1: every GPU does the same work) with two GPUs or more on a node."""
    runs, gpus = _runs(t), t.get("gpus", pd.DataFrame())
    if gpus is None or gpus.empty or runs.empty or "temp_avg_c" not in gpus.columns:
        return pd.DataFrame()
    ok = runs[(runs["status"] == "ok") & (column(runs, "pp") == 1)]
    g = gpus[gpus["cell_id"].isin(ok["cell_id"])].copy()
    g = g[np.isfinite(column(g, "temp_avg_c"))]
    n = g.groupby(["cell_id", "node"])["gpu_index"].transform("nunique")
    return g[n >= 2]


def _asymmetry(t: Tables) -> Evidence:
    g = _node_gpus(t)
    if g.empty:
        return Evidence(missing="no symmetric cell (pp = 1) with two or more GPUs of one node and GPU temperatures")
    rows, hottest = [], []
    for _, d in g.groupby(["cell_id", "node"], sort=False):
        temp = column(d, "temp_avg_c")
        rows.append((temp.max() - temp.min()) / temp.min() * 100.0)
        hottest.append(int(d["gpu_index"].iloc[int(np.argmax(temp.to_numpy()))]))
    counts = pd.Series(hottest).value_counts()
    detail = (f"spread per cell and node {min(rows):.1f}-{max(rows):.1f}%; hottest GPU index "
              + ", ".join(f"{i} in {n}" for i, n in counts.items()) + f" of {len(rows)}")
    return Evidence(mean_interval(rows, 0.0, "cells"), f"{len(rows)} symmetric cell(s) x node",
                    list(dict.fromkeys(g["cell_id"])), 1, detail=detail)


def _hot_clock(t: Tables) -> Evidence:
    g = _node_gpus(t)
    if g.empty or "sm_clock_avg_mhz" not in g.columns:
        return Evidence(missing="no symmetric cell (pp = 1) with two or more GPUs of one node, temperatures and clocks")
    diffs = []
    for _, d in g.groupby(["cell_id", "node"], sort=False):
        temp, clock = column(d, "temp_avg_c").to_numpy(), column(d, "sm_clock_avg_mhz").to_numpy()
        if not np.isfinite(clock).all() or temp.max() == temp.min():
            continue
        diffs.append(float(clock[int(np.argmax(temp))] - clock[int(np.argmin(temp))]))
    if not diffs:
        return Evidence(missing="no cell whose GPUs differ in temperature and report SM clocks")
    return Evidence(mean_interval(diffs, 0.0, "cells"), f"{len(diffs)} symmetric cell(s) x node: hottest - coolest",
                    list(dict.fromkeys(g["cell_id"])), 1)


def _compute_share(moe: bool) -> Callable[[Tables], Evidence]:
    """Kernel-time share of the profiled step (summed over traced ranks, as the study's Fig. 10): the compute share
    of the dense configuration with the lowest one ("always above"), or the communication share of the MoE
    configuration with tp > 1 with the highest one; its interval over that configuration's repetitions."""

    def check(t: Tables) -> Evidence:
        runs, k = _runs(t), t.get("kernels", pd.DataFrame())
        if k is None or k.empty or "sum_s" not in k.columns:
            return Evidence(missing="no kernel trace")

        def share(df: pd.DataFrame) -> pd.Series:
            kk = k[k["cell_id"].isin(df["cell_id"])]
            tot = kk.groupby("cell_id")["sum_s"].sum()
            comm = kk[kk["is_comm"].astype(bool)].groupby("cell_id")["sum_s"].sum().reindex(tot.index, fill_value=0)
            s = ((comm if moe else tot - comm) / tot.where(tot > 0)).reindex(df["cell_id"])
            return pd.Series(s.to_numpy(), index=df.index)

        # one GPU has nothing to communicate: its share says nothing about distributed training
        multi = lambda d: column(d, "world_size") > 1  # noqa: E731
        where = (lambda d: _is_moe(d) & (column(d, "tp") > 1) & multi(d)) if moe else (lambda d: ~_is_moe(d) & multi(d))
        cf = configs(runs, share, where=where)
        if not cf:
            return Evidence(missing=("no traced MoE cell with tp > 1" if moe else "no traced dense cell on two GPUs or "
                                     "more"))
        pick = max(cf, key=lambda c: c.mean) if moe else min(cf, key=lambda c: c.mean)
        detail = "; ".join(f"{c.config_id}: {c.mean:.3f}" for c in sorted(cf, key=lambda c: c.mean))
        what = "highest communication" if moe else "lowest compute"
        return Evidence(mean_interval(pick.values, 0.0, "repetitions"),
                        f"{what} share of {len(cf)} traced configuration(s): {pick.config_id}", [pick.config_id],
                        len(pick.values), detail=detail)

    return check


def _hardware_ratio(metric: tuple[str, ...]) -> Callable[[Tables], Evidence]:
    """H200 / H100 ratio of a per-GPU metric over configurations equal but for the hardware (this sweep and the
    sweeps it names for comparison)."""

    def check(t: Tables) -> Evidence:
        both = pd.concat([d for d in (_runs(t), t.get("compare")) if d is not None and not d.empty],
                         ignore_index=True) if not _runs(t).empty else pd.DataFrame()
        cf = configs(both, metric)
        prs = pairs(cf, "hardware", lambda v: v == "h200", lambda v: v == "h100")
        if not prs:
            hw = sorted(set(both["hardware"])) if not both.empty else []
            absent = t.get("compare_missing")
            named = (f"; sweep(s) named under compare: without tables yet: {', '.join(absent['sweep'])}"
                     if absent is not None and not absent.empty else "; name the other sweep under compare:")
            return Evidence(missing=f"no configuration measured on both h200 and h100 (hardware here: "
                            f"{', '.join(hw) or 'none'}{named})")
        est = pair_effect(prs, transform=np.log).map(math.exp)
        cfgs = [c for p in prs for c in p]
        detail = "; ".join(f"{a.config_id}: {a.mean / b.mean:.3f}" for a, b in prs)
        return Evidence(est, f"{len(prs)} configuration(s) on both h200 and h100 (ratio of means)", _ids(prs),
                        min_repeats(cfgs), detail=detail)

    return check


def _knob_pairs(knob: str, base: str, metric: tuple[str, ...], missing: str) -> Callable[[Tables], Evidence]:
    """Relative change of the metric between a knob's variants and its ``base`` value (e.g. placement)."""

    def check(t: Tables) -> Evidence:
        runs = _runs(t)
        if knob not in runs.columns:
            return Evidence(missing=missing)
        cf = configs(runs, metric)
        prs = pairs(cf, knob, lambda v: v not in (None, base), lambda v: v == base)
        if not prs:
            return Evidence(missing=missing)
        est = pair_effect(prs, transform=np.log).map(lambda v: (math.exp(v) - 1) * 100)
        return Evidence(est, f"{len(prs)} pair(s) {knob} != {base} vs {base}", _ids(prs),
                        min_repeats([c for p in prs for c in p]))

    return check


def _unmeasured(why: str) -> Callable[[Tables], Evidence]:
    return lambda t: Evidence(missing=why)


# ---------------------------------------------------------------------------------------------------------------
# the catalogue

_DP = lambda d: (column(d, "pp") == 1) & (column(d, "dp") > 1)  # noqa: E731 - data-parallel / FSDP layouts
_DEEP_PP = lambda d: column(d, "pp") >= 4  # noqa: E731 - "deep" pipelines (the study's are 16-32 stages)
_FSDP = lambda d: (column(d, "pp") == 1) & (column(d, "zero_stage") == 3)  # noqa: E731
_PP = lambda d: column(d, "pp") > 1  # noqa: E731

FINDINGS: tuple[Finding, ...] = (
    Finding("overlap_raises_peak_temp",
            "Compute-communication overlap (cc) consistently raises peak GPU temperature.",
            "direction only (no value recovered)", "[S2]", "Fig. 8",
            "peak GPU temperature, overlap on - off, same configuration otherwise", "degC", +1,
            _overlap(("temp_peak_c",), TEMP_RESOLUTION_C), tolerance=TEMP_RESOLUTION_C,
            needs="overlap on/off pairs (ZeRO dp > 1, or TP with SP)"),
    Finding("overlap_raises_throttling",
            "Overlap raises throttling (lower SM clock).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, overlap on - off (negative = more throttling)", "MHz", -1,
            _overlap(("sm_clock_avg_mhz",)), tolerance=CLOCK_TOLERANCE_MHZ,
            needs="overlap on/off pairs (ZeRO dp > 1, or TP with SP)"),
    Finding("recompute_less_throttling_deep_pp",
            "Activation recomputation reduces throttling in deep-pipeline configurations (GPT3-175B, PP16-32).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, layouts with pp >= 4 (positive = less throttling)", "MHz", +1,
            _recompute_clock(_DEEP_PP, "pp >= 4"), tolerance=CLOCK_TOLERANCE_MHZ,
            needs="recompute on/off pairs of layouts with pp >= 4 (4 GPUs or more)"),
    Finding("recompute_more_throttling_dp",
            "... but increases throttling in data-parallel / FSDP configurations (Llama3-70B).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, pp = 1 layouts with dp > 1 (negative = more throttling)", "MHz",
            -1, _recompute_clock(_DP, "data-parallel (pp = 1, dp > 1)"), tolerance=CLOCK_TOLERANCE_MHZ,
            needs="recompute on/off pairs of data-parallel layouts"),
    Finding("microbatch_raises_peak_power",
            "Peak power rises with micro-batch size, whether or not throughput improves.",
            "direction only", "[Abs; S2]", "Fig. 13",
            "peak GPU power per doubling of the micro-batch (slope within configurations)", "W/doubling", +1,
            _mb_slope(("power_peak_w",)), tolerance=5.0, needs="micro-batch 1/2/4/8 of a configuration"),
    Finding("microbatch_raises_peak_temp",
            "Peak temperature rises with micro-batch size.",
            "direction only", "[S2; S3]", "Fig. 13",
            "peak GPU temperature per doubling of the micro-batch", "degC/doubling", +1,
            _mb_slope(("temp_peak_c",), TEMP_RESOLUTION_C), tolerance=0.5,
            needs="micro-batch 1/2/4/8 of a configuration"),
    Finding("microbatch_speeds_up_fsdp",
            "Larger micro-batches speed FSDP up: GPT3-175B TP8-FSDP, micro-batch 1 -> 4 gives a >3x step-time "
            "speed-up.",
            ">3x from mb 1 to 4 (= >1.73x per doubling)", "[S3, unverified]", "Fig. 13",
            "tokens/s ratio per doubling of the micro-batch, FSDP (ZeRO-3, pp = 1) configurations", "x/doubling",
            +1, _mb_slope(("tokens_per_s",), log=True, where=_FSDP, what=" (FSDP)"), threshold=1.0,
            tolerance=0.02, needs="micro-batch sweep of an FSDP configuration", study_number=3.0**0.5),
    Finding("microbatch_no_gain_pp",
            "In pipeline-heavy configurations (TP2-PP16) the micro-batch benefit vanishes or reverses.",
            "<= 1x", "[S3, unverified]", "Fig. 13",
            "tokens/s ratio per doubling of the micro-batch, pipeline (pp > 1) configurations", "x/doubling", -1,
            _mb_slope(("tokens_per_s",), log=True, where=_PP, what=" (pp > 1)"), threshold=1.0, tolerance=0.02,
            needs="micro-batch sweep of a pipeline configuration"),
    Finding("deep_pp_throttles_more",
            "Deep pipelines throttle more than TP-heavy configurations.",
            "direction only (PP16-32 vs TP8)", "[S2]", "Fig. 4",
            "mean SM clock per doubling of pipeline depth across tp x pp layouts of one model (negative = deeper "
            "pipelines throttle more)", "MHz/doubling", -1, _layout_depth_clock, tolerance=CLOCK_TOLERANCE_MHZ,
            needs="tp x pp layouts at two or more pipeline depths (2 GPUs: TP2 vs PP2; 8: TP8 ... PP8)"),
    Finding("gpus_thermally_asymmetric",
            "Air-cooled HGX nodes are thermally asymmetric: rear GPUs run up to 27% hotter than front GPUs.",
            "up to 27%", "[S2]", "Fig. 17 / Sec. 6",
            "(hottest - coolest) / coolest mean GPU temperature within a node, symmetric (pp = 1) cells", "%", +1,
            _asymmetry, tolerance=2.0,
            needs="cells with two or more GPUs of one node doing the same work; the GPUs' positions in the "
            "airflow are not recorded (which is 'rear' is not known)"),
    Finding("hot_gpus_clock_lower",
            "Hotter GPUs run at reduced clocks.",
            "direction only", "[S2]", "Fig. 17 / Sec. 6",
            "mean SM clock of the hottest - the coolest GPU of a node, symmetric (pp = 1) cells", "MHz", -1,
            _hot_clock, tolerance=CLOCK_TOLERANCE_MHZ, needs="symmetric cells with two or more GPUs of one node"),
    Finding("dense_compute_share_over_half",
            "In dense models (Llama3-70B) compute kernels are always more than 50% of kernel time.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "compute (non-communication) share of summed kernel time of the profiled step, dense configuration with "
            "the lowest share", "fraction",
            +1, _compute_share(moe=False), threshold=0.5, needs="kernel traces of dense cells"),
    Finding("moe_tp_comm_share_over_half",
            "Mixtral-8x22B EP8-TP4-PP1 spends more than 50% of kernel time in communication kernels.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "communication share of summed kernel time, MoE configuration with tp > 1 with the highest share",
            "fraction", +1,
            _compute_share(moe=True), threshold=0.5, needs="kernel traces of MoE cells with tp > 1"),
    Finding("h100_scale_out_wins_compute_bound",
            "64 H100 (scale-out) beat 32 H200 (scale-up) for compute-bound dense models (Llama3-70B).",
            "direction only; 64 H100 have 2x the BF16 FLOPs of 32 H200 [I]", "[Abs; S3, unverified]",
            "H200 vs H100 comparison",
            "per-GPU tokens/s, H200 / H100, same single-node configuration: the 64-H100 cluster wins on compute if "
            "this ratio is below 2 (communication between nodes not measured)", "x", -1,
            _hardware_ratio(("tokens_per_s_per_gpu",)), threshold=2.0,
            needs="the same configuration on H200 and H100 (name the other sweep under compare:); the cluster "
            "claim also needs 4-node H200 and 8-node H100 runs with inter-node communication"),
    Finding("h200_energy_per_token",
            "H200 wins on energy efficiency in communication-bound configurations (Mixtral-8x22B EP8-TP1-PP4, "
            "GPT3-175B TP2-PP16).",
            "direction only", "[S3, unverified]", "H200 vs H100 comparison",
            "energy per token, H200 / H100, same single-node configuration (below 1: H200 more efficient)", "x", -1,
            _hardware_ratio(("energy_per_token_j",)), threshold=1.0, tolerance=0.02,
            needs="the same configuration on H200 and H100 with GPU telemetry; the study's configurations span "
            "4-8 nodes (their inter-node communication is what makes them communication-bound)"),
    Finding("tp_pp_underuse_pcie",
            "TP combined with PP produces sparse, uncoordinated SendRecv that under-utilises PCIe/NIC bandwidth.",
            "qualitative", "[Abs; S3]", "Fig. 5",
            "", "", +1, _unmeasured("inter-node traffic: one node has no NIC traffic, and the NVML PCIe byte counters "
                                    "are not trusted here (docs/findings.md, 'PCIe byte counters')"),
            needs="multi-node runs with InfiniBand counters"),
    Finding("thermal_aware_placement",
            "Thermal-aware / asymmetric pipeline-stage placement: +4% efficiency on Llama3-70B (PP4, 21/19 layers), "
            "-7% on GPT3-175B (PP8, 13/11).",
            "+4% / -7% efficiency", "[S3; S1 '4-7%']", "Sec. 6",
            "efficiency change of a non-default placement vs the default, same configuration otherwise", "%", +1,
            _knob_pairs("placement", "default", ("efficiency",),
                        "no placement variants (Cell.placement, issue 13) in this sweep"),
            needs="placement variants of pipeline layouts (issue 13)"),
    Finding("power_fault_straggler",
            "A node power-delivery fault made GPUs run >4x slower (stragglers).",
            ">4x slower", "[S2; S3]", "observed event",
            "", "", +1, _unmeasured("an observed fault, not a designed experiment"),
            needs="a run during a power-delivery fault"),
    Finding("lora_lower_power",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            ">10x efficiency", "[S2]", "LoRA section",
            "", "", +1, _unmeasured("no LoRA workload in calorimeter"), needs="a LoRA fine-tuning cell kind"),
    Finding("mi250_package_skew",
            "MI250: 5-10 degC temperature skew between the two dies of one package.",
            "5-10 degC", "[S2]", "MI250 section",
            "", "", +1, _unmeasured("no AMD MI250 measurement"), needs="a run on MI250 GPUs"),
)


def finding_ids() -> list[str]:
    """Ids in catalogue order."""
    return [f.id for f in FINDINGS]


