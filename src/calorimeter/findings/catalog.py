"""The study's findings, each as a computed check on a sweep's tables, with its claim and its preconditions.

Each ``Finding`` carries the study's statement and number with their provenance tags (shared notes
``paper-findings.md``: [A] artifact, [Abs] abstract, [S1]-[S5] secondary sources, [I] inference), the
:class:`~calorimeter.findings.stats.Claim` the verdict judges (direction, tolerance, stated size), the regime in
which the stated size can occur, and a check that turns the sweep's tables into an ``Evidence``: an effect with its
interval over units of replication (repetitions on one machine, or machines) of the cells that meet the finding's
preconditions (:mod:`calorimeter.findings.preconditions`), or why the sweep cannot answer. The study's wording, its
source and the definition of each number are registered in ``definitions.yaml`` beside this module, before the data.

"Throttling" is read, as in the study's figures, from the mean SM clock over the measured steps (a lower clock is
more throttling), only on steady cells that sit at the power cap below the clock ceiling; peak temperature and power
are the maximum over the cell's GPUs of each GPU's peak, only on steady windows below the power cap.

The catalogue is versioned (:data:`CATALOG_VERSION`, written into ``findings.csv``); :data:`CATALOG_CHANGES` says
what each version changed. A change of a check re-evaluates every committed reference set (docs/findings.md lists
the verdicts that changed); data and the check that decides on it never land in the same commit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd
import yaml

from calorimeter.findings import checks as ck
from calorimeter.findings.checks import TEMP_RESOLUTION_C, Evidence, Tables
from calorimeter.findings.preconditions import (
    BELOW_POWER_CAP,
    CLOCK_STEP_MHZ,
    COMM_BOUND,
    GPU,
    GPU_BOUND,
    MULTI_NODE,
    POWER_CAPPED,
    REAL_MODEL,
    STEADY,
    Precondition,
)
from calorimeter.findings.select import LAYOUT_PARAMS, column
from calorimeter.findings.stats import Claim
from calorimeter.plan.kinds import kind_of
from calorimeter.plan.models import CATALOGUE

#: the catalogue's version, written into every ``findings.csv``
CATALOG_VERSION = 7
#: what each version changed (docs/findings.md has the verdicts each change moved)
CATALOG_CHANGES = {
    1: "the first catalogue (findings.csv without a catalog_version column)",
    2: "symmetric verdicts with sizes and >= 2 degrees of freedom; repetitions as the experimental unit; "
       "preconditions (steady windows, power cap below the clock ceiling, the claim's regime); the cross-hardware "
       "findings judged on clusters over nodes; asymmetry on a held-out hot GPU against the study's 27%; FSDP judged "
       "on micro-batch 1 -> 4 against >3x; placement only `thermal` vs `default`; LoRA findings",
    3: "LoRA's lower power and temperature judged only on cells below the power cap (at the cap the limit, not the "
       "load, sets both: two capped cells can only read 'no change')",
    4: "a host is a physical machine, told apart by its GPUs' NVML UUIDs, not by hostname (rented cloud machines "
       "are often all called 'vm': cells of two machines read as one host in the asymmetry finding)",
    5: "one verdict rule for sized claims, symmetric and monotonic (agrees only inside the size; straddling an edge "
       "cannot say; a size that cannot occur in the regime cannot say); the machine as a unit (pairs and slopes "
       "within machine and repetition; asymmetry and hot-GPU clocks over machines; dof in both units); "
       "preconditions by physics everywhere (below the power cap for every power and temperature claim, steady "
       "windows for every clock comparison, GPU-bound on both sides of every comparison, deep pipeline pp >= 4, "
       "data parallel dp >= 2); definitions registered beside the study's wording (the dense compute share is the "
       "study's GEMM/attention class; LoRA's number is the study's efficiency, not tokens per joule)",
    6: "a steady window is judged on the measured window itself from the telemetry (every GPU's temperature drift "
       "over it, from its least-squares slope over >= 30 s, below the sensor's 1 degC), no longer by the warm-up's "
       "runtime flag (a 15 s slope <= 1 degC/min, which four GPUs on their plateau met 2% of the time and which "
       "did not select steadier windows); changed after the 4-GPU sweep 4A showed the flaw",
    7: "a slope finding with a regime (a deep pipeline, pp >= 4) counts a repetition only when that repetition's own "
       "cells on its machine meet the regime: a repetition with TP4 and TP2-PP2 but no PP4 cell gave a slope to PP2 "
       "that was averaged in with the slopes to PP4",
}

__all__ = ["CATALOG_CHANGES", "CATALOG_VERSION", "FINDINGS", "NOISE", "Definition", "Evidence", "Finding", "Tables",
           "definition_of", "finding_ids"]

#: the registered wording, source and definition of every finding (beside this module)
DEFINITIONS_FILE = Path(__file__).with_name("definitions.yaml")


@dataclass(frozen=True)
class Definition:
    """What a finding's verdict is on, registered before the data (``definitions.yaml``).

    Attributes:
        wording: the study's statement as its source gives it.
        source: where the wording comes from: the paper (or its artifact), or a secondary summary marked unverified.
        definition: the number the verdict judges, exactly.
        secondary: another reading shown beside it, labelled, never judged ("" when none).
    """

    wording: str
    source: str
    definition: str
    secondary: str = ""


@cache
def _definitions() -> dict[str, Definition]:
    raw = yaml.safe_load(DEFINITIONS_FILE.read_text()) or {}
    return {k: Definition(**v) for k, v in raw.items()}


def definition_of(finding_id: str) -> Definition:
    """The registered definition of a finding (a KeyError names a finding the file lacks)."""
    try:
        return _definitions()[finding_id]
    except KeyError:
        raise KeyError(f"{finding_id!r} has no entry in {DEFINITIONS_FILE.name}") from None


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
        rule: what the claim says about that number (direction, no-effect value, tolerance, stated size).
        check: the computation on the sweep's tables (``runs``, ``gpus``, ``kernels``, and ``compare``: the runs
            tables of the sweeps the configuration names for cross-sweep findings).
        preconditions: what the compared cells must meet (for the reader; the check applies them).
        needs: the measurement that would answer it, and how much hardware it takes ("1 GPU", "2 GPUs of one node",
            "4 GPUs of one node", "several nodes", or "not measurable").
        measurable: whether calorimeter can measure it at all (False: always *cannot say*, with why).
        size_regime: for a claim with a size, where that size can occur (a condition every compared cell must
            meet); None: anywhere.
        size_regime_why: why the size cannot occur outside it, for the verdict's reason.
    """

    id: str
    claim: str
    study_value: str
    provenance: str
    figure: str
    metric: str
    unit: str
    rule: Claim
    check: Callable[[Tables], Evidence]
    preconditions: tuple[Precondition, ...] = ()
    needs: str = ""
    measurable: bool = True
    size_regime: Precondition | None = None
    size_regime_why: str = ""

    @property
    def sign(self) -> int:
        """The claimed direction (+1 above, -1 below ``threshold``)."""
        return self.rule.sign

    @property
    def threshold(self) -> float:
        """The no-effect value of the claim."""
        return self.rule.null

    @property
    def definition(self) -> Definition:
        """The registered wording, source and definition (``definitions.yaml``)."""
        return definition_of(self.id)


def overlap_effective(df: pd.DataFrame) -> pd.Series:
    """Rows where ``overlap`` changes anything (docs/knobs.md): ZeRO's overlapped reduction and prefetch need dp > 1;
    the tensor-parallel overlap needs tp > 1 with sequence parallelism."""
    sp = df["sequence_parallel"].fillna(False).astype(bool) if "sequence_parallel" in df.columns else False
    return ((column(df, "zero_stage") >= 1) & (column(df, "dp") > 1)) | ((column(df, "tp") > 1) & sp)


def is_moe(df: pd.DataFrame) -> pd.Series:
    """Rows of a mixture-of-experts model."""
    return df["model"].map(lambda m: CATALOGUE[m].is_moe if m in CATALOGUE else "mixtral" in str(m))


#: a deep pipeline, everywhere: pp >= 4 (the study's are 16-32 stages; PP2 is not pipeline-heavy)
DEEP_PP_MIN = 4
_DEEP_PP = lambda d: column(d, "pp") >= DEEP_PP_MIN  # noqa: E731
#: data-parallel, everywhere: dp >= 2 (one GPU and tensor-parallel-only layouts are neither DP nor FSDP), and no deep
#: pipeline (that is the other recomputation claim's regime: no layout is judged under both)
_DP = lambda d: (column(d, "dp") >= 2) & (column(d, "pp") < DEEP_PP_MIN)  # noqa: E731
_FSDP = lambda d: (column(d, "pp") == 1) & (column(d, "zero_stage") == 3) & (column(d, "dp") >= 2)  # noqa: E731
_MULTI = lambda d: column(d, "world_size") > 1  # noqa: E731 - one GPU has nothing to communicate
_DENSE = lambda d: ~is_moe(d)  # noqa: E731
_is_lora = lambda v: (k := kind_of(v)) is not None and k.adapters  # noqa: E731 - LoRA adapters on a frozen base
_is_full = lambda v: (k := kind_of(v)) is not None and k.full_training  # noqa: E731
_pct = lambda v: (v - 1.0) * 100.0  # noqa: E731 - a ratio as a % change


def _deep_regime(g: list) -> bool:
    return max(c.params.get("pp") or 1 for c in g) >= DEEP_PP_MIN


def _bubble(cfgs: list) -> str:
    """The 1F1B bubble (pp - 1) / (m + pp - 1) of each compared micro-batch (m micro-batches a step)."""
    out = {}
    for c in cfgs:
        pp, mb, gb, dp = (c.params.get(k) for k in ("pp", "micro_batch", "global_batch", "dp"))
        if pp and mb and gb and dp:
            m = gb / (mb * dp)
            out[int(mb)] = (pp - 1) / (m + pp - 1)
    return ("1F1B bubble " + ", ".join(f"mb{k}: {v:.0%}" for k, v in sorted(out.items()))) if out else ""


#: a pipeline-depth group varies the tp x pp layout (and SP, splits) at a fixed data-parallel degree
_LAYOUT_BUT_PP = tuple(p for p in LAYOUT_PARAMS if p not in ("dp", "pp"))
_OVERLAP_NEEDS = "overlap on/off pairs where overlap acts (ZeRO with dp > 1, or tp > 1 with sequence parallelism)"
#: power and temperature move with the load only below the cap, on steady windows, and on GPU-bound cells
_THERMAL = (GPU, STEADY, BELOW_POWER_CAP, GPU_BOUND)
#: the clock moves with the configuration only at the cap below the ceiling, on steady windows, GPU-bound
_CLOCK = (GPU, STEADY, POWER_CAPPED, GPU_BOUND)
#: throughput and efficiency compare GPU-bound cells (a host-bound side measures its host)
_SPEED = (GPU, GPU_BOUND)
_SPEED_STEADY = (GPU, STEADY, GPU_BOUND)
#: one node over NVLink: the study's sizes that come from inter-node traffic cannot occur
_ONE_NODE_FSDP = ("one node over NVLink: the study's >3x comes from FSDP's parameter all-gathers over a 100 Gb/s "
                  "network between nodes, which take a small share of the step over NVLink")
_ONE_NODE_LORA = ("one node at equal sequence length: LoRA saves at most the weight gradients and optimizer step "
                  "(about 6N -> 4N FLOPs a token), so the 1/(P x T^2) efficiency gains at most about 2.3-2.9x; the "
                  "study's >10x needs shorter LoRA sequences or data-parallel gradient traffic over a network")

FINDINGS: tuple[Finding, ...] = (
    Finding("overlap_raises_peak_temp",
            "Compute-communication overlap (cc) consistently raises peak GPU temperature.",
            "direction only (no value recovered)", "[S2]", "Fig. 8",
            "peak GPU temperature, overlap on - off, same configuration otherwise", "degC",
            Claim(+1, 0.0, TEMP_RESOLUTION_C),
            ck.knob(("temp_peak_c",), "overlap", bool, lambda v: not bool(v), "overlap (on - off)",
                    f"no {_OVERLAP_NEEDS}", _THERMAL, overlap_effective, resolution=TEMP_RESOLUTION_C),
            _THERMAL, needs="2 GPUs of one node: >= 3 interleaved repetitions of overlap on/off (ZeRO-3 dp2, TP2+SP), "
            "steady, GPU-bound, in a configuration whose GPUs stay below the power cap (shorter sequence or fewer "
            "layers: at the cap the limit sets the temperature); the study's TP8 cc needs 8 GPUs"),
    Finding("overlap_raises_throttling",
            "Overlap raises throttling (lower SM clock).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, overlap on - off (negative = more throttling)", "MHz", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "overlap", bool, lambda v: not bool(v), "overlap (on - off)",
                    f"no {_OVERLAP_NEEDS}", _CLOCK, overlap_effective, secondary=ck.LOADED_CLOCK),
            _CLOCK, needs="2 GPUs of one node: overlap on/off, >= 3 interleaved repetitions per layout, steady, "
            "GPU-bound on both sides (sequence 8192), at the power cap"),
    Finding("recompute_less_throttling_deep_pp",
            "Activation recomputation reduces throttling in deep-pipeline configurations (GPT3-175B, PP16-32).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, layouts with pp >= 4 (positive = less throttling)", "MHz",
            Claim(+1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "recompute", lambda v: v == "full", lambda v: v == "none",
                    "recompute (full - none)", "no recompute full/none pair of a layout with pp >= 4", _CLOCK,
                    _DEEP_PP, also=("recompute_layers",), secondary=ck.LOADED_CLOCK),
            _CLOCK, needs="4 GPUs of one node: TP1-PP4 with and without recompute, >= 5 interleaved repetitions "
            "(on the measured clock noise 3 pairs cannot tell no effect from one clock step: docs/findings.md, "
            "reachability), steady, at the power cap; the study's PP16-32 needs several nodes"),
    Finding("recompute_more_throttling_dp",
            "... but increases throttling in data-parallel / FSDP configurations (Llama3-70B).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, data-parallel layouts (dp >= 2, pp < 4) (negative = more "
            "throttling)", "MHz",
            Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "recompute", lambda v: v == "full", lambda v: v == "none",
                    "recompute (full - none)", "no recompute full/none pair of a data-parallel layout (dp >= 2, "
                    "pp < 4; one GPU and tensor-parallel-only layouts are not data-parallel)", _CLOCK, _DP,
                    also=("recompute_layers",), secondary=ck.LOADED_CLOCK),
            _CLOCK, needs="2-4 GPUs of one node: ZeRO-3 dp2 or dp4 recompute none/full, GPU-bound (sequence 8192), "
            ">= 3 interleaved repetitions, steady (warm-up cap 75 s on H200, 120 s on H100), at the power cap"),
    Finding("microbatch_raises_peak_power",
            "Peak power rises with micro-batch size, whether or not throughput improves.",
            "direction only", "[Abs; S2]", "Fig. 13",
            "peak GPU power per doubling of the micro-batch (slope within configurations, per repetition)",
            "W/doubling", Claim(+1, 0.0, 5.0),
            ck.slope(("power_peak_w",), "micro_batch", "", "no configuration measured at two or more micro-batch "
                     "sizes", _THERMAL),
            _THERMAL, needs="1 GPU: micro-batch 1/2/4 of one configuration that is GPU-bound at micro-batch 1 and "
            "stays below the power cap at 4 (fewer layers or a shorter sequence), >= 5 interleaved repetitions (peak "
            "power is the noisiest metric: docs/findings.md, reachability), steady"),
    Finding("microbatch_raises_peak_temp",
            "Peak temperature rises with micro-batch size.",
            "direction only", "[S2; S3]", "Fig. 13",
            "peak GPU temperature per doubling of the micro-batch (per repetition)", "degC/doubling",
            Claim(+1, 0.0, 0.5),
            ck.slope(("temp_peak_c",), "micro_batch", "", "no configuration measured at two or more micro-batch "
                     "sizes", _THERMAL, resolution=TEMP_RESOLUTION_C),
            _THERMAL, needs="1 GPU: as microbatch_raises_peak_power (GPU-bound on both sides, below the power cap)"),
    Finding("microbatch_speeds_up_fsdp",
            "Larger micro-batches speed FSDP up: GPT3-175B TP8-FSDP, micro-batch 1 -> 4 gives a >3x step-time "
            "speed-up.",
            ">3x from mb 1 to 4", "[S3, unverified]", "Fig. 13",
            "tokens/s, micro-batch 4 / micro-batch 1, FSDP (ZeRO-3, dp >= 2, pp = 1) configurations", "x",
            Claim(+1, 1.0, 0.02, size=(3.0, math.inf)),
            ck.knob(("tokens_per_s",), "micro_batch", lambda v: v == 4, lambda v: v == 1, "micro-batch (4 / 1)",
                    "no FSDP (ZeRO-3, dp >= 2, pp = 1) configuration measured at micro-batch 1 and 4", _SPEED, _FSDP,
                    ratio=True, scale="log"),
            _SPEED, needs="several nodes for the study's size (FSDP over a network); the direction on 2-4 GPUs of one "
            "node: ZeRO-3 dp2/dp4 micro-batch 1 and 4 at one global batch, GPU-bound on both sides, >= 3 repetitions",
            size_regime=MULTI_NODE, size_regime_why=_ONE_NODE_FSDP),
    Finding("microbatch_no_gain_pp",
            "In pipeline-heavy configurations (TP2-PP16) the micro-batch benefit vanishes or reverses.",
            "<= 1x", "[S3, unverified]", "Fig. 13",
            "tokens/s ratio per doubling of the micro-batch, pipeline-heavy (pp >= 4) configurations (no gain: "
            "<= 1.02x)", "x/doubling", Claim(-1, 1.02, 0.0),
            ck.slope(("tokens_per_s",), "micro_batch", " (pp >= 4)", "no pipeline-heavy (pp >= 4) configuration "
                     "measured at two or more micro-batch sizes", _SPEED, _DEEP_PP, log=True, extra=_bubble),
            _SPEED, needs="4 GPUs of one node: TP1-PP4 micro-batch 1/2/4 at global batch 32, >= 3 interleaved "
            "repetitions, GPU-bound; the study's TP2-PP16 at global batch 128 needs several nodes"),
    Finding("deep_pp_throttles_more",
            "Deep pipelines throttle more than TP-heavy configurations.",
            "direction only (PP16-32 vs TP8)", "[S2]", "Fig. 4",
            "mean SM clock per doubling of pipeline depth across tp x pp layouts of one model reaching pp >= 4 "
            "(negative = deeper pipelines throttle more)", "MHz/doubling", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.slope(("sm_clock_avg_mhz",), "pp", "", "no model measured over two or more pipeline depths (tp x pp "
                     "layouts, everything else fixed)", _CLOCK,
                     lambda d: (column(d, "zero_stage") < 3) & (column(d, "ep") <= 1), hold=_LAYOUT_BUT_PP,
                     regime=_deep_regime, regime_missing="no layout group reaching pp >= 4 (PP2 is not a deep "
                     "pipeline)", secondary=ck.LOADED_CLOCK),
            _CLOCK, needs="4 GPUs of one node: TP4+SP, TP2-PP2+SP, TP1-PP4 with >= 3 interleaved repetitions, steady, "
            "at the power cap; PP16-32 needs several nodes"),
    Finding("gpus_thermally_asymmetric",
            "Air-cooled HGX nodes are thermally asymmetric: rear GPUs run up to 27% hotter than front GPUs.",
            "up to 27%", "[S2]", "Fig. 17 / Sec. 6",
            "(hot - cool) / cool mean GPU temperature within a node, hot and cool GPU chosen on other cells "
            "(symmetric pp = 1 cells, steady); the interval over machines", "%", Claim(+1, 0.0, 2.0, size=(0.0, 27.0)),
            ck.asymmetry((GPU, STEADY), "no steady symmetric cell (pp = 1) with two or more GPUs of one node and GPU "
                         "temperatures"),
            (GPU, STEADY), needs="three machines or more (cells of one machine are not machines): >= 2 steady "
            "symmetric cells on each, pooled over sets (docs/findings.md); the rear/front position needs bare-metal "
            "8-GPU hosts with known slots"),
    Finding("hot_gpus_clock_lower",
            "Hotter GPUs run at reduced clocks.",
            "direction only", "[S2]", "Fig. 17 / Sec. 6",
            "mean SM clock of the hottest - the coolest GPU of a node, symmetric (pp = 1) cells, steady, at the power "
            "cap; the interval over machines", "MHz", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.hot_clock((GPU, STEADY, POWER_CAPPED), "no steady symmetric cell (pp = 1) at the power cap with two "
                         "or more GPUs of one node, temperatures and clocks"),
            (GPU, STEADY, POWER_CAPPED), needs="three machines or more (more cells of one machine do not help): "
            "steady symmetric cells at the power cap on each, pooled over sets (docs/findings.md)"),
    Finding("dense_compute_share_over_half",
            "In dense models (Llama3-70B) compute kernels are always more than 50% of kernel time.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "GEMM/attention share (the study's 'Compute (GEMM/SDPA)' class) of summed kernel time of the profiled "
            "step, dense configuration with the lowest share", "fraction", Claim(+1, 0.5, 0.02),
            ck.kernel_share("gemm_attention", ck._and(_DENSE, _MULTI), (GPU, REAL_MODEL), "no traced dense cell on "
                            "two GPUs or more", pick_max=False, secondary="non_comm"),
            (GPU, REAL_MODEL), needs="2-4 GPUs of one node: >= 3 traced repetitions of each layout (ZeRO-3 dp4, TP4), "
            "all ranks traced; the study's inter-node shares need several nodes"),
    Finding("moe_tp_comm_share_over_half",
            "Mixtral-8x22B EP8-TP4-PP1 spends more than 50% of kernel time in communication kernels.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "communication share of summed kernel time, MoE configuration with tp > 1 and experts over several "
            "nodes, with the highest share", "fraction", Claim(+1, 0.5, 0.02),
            ck.kernel_share("comm", ck._and(is_moe, _MULTI, lambda d: (column(d, "tp") > 1) & (column(d, "ep") > 1)),
                            (GPU, REAL_MODEL, MULTI_NODE), "no traced MoE cell with tp > 1 and expert parallelism",
                            pick_max=True),
            (GPU, REAL_MODEL, MULTI_NODE), needs="several nodes: traced, repeated Mixtral cells with tp > 1 and "
            "experts across nodes (EP8-TP4 needs 32 GPUs); one node has no inter-node all-to-all, so it cannot say"),
    Finding("h100_scale_out_wins_compute_bound",
            "64 H100 (scale-out) beat 32 H200 (scale-up) for compute-bound dense models (Llama3-70B).",
            "direction only", "[Abs; S3, unverified]", "H200 vs H100 comparison",
            "tokens/s of a multi-node H100 job / the same configuration on half as many H200 (dense model)", "x",
            Claim(+1, 1.0, 0.02),
            ck.cluster_ratio(("tokens_per_s",), "h100", "h200", 2.0, "no dense configuration measured on several "
                             "nodes of H100 and on half as many H200", (GPU, MULTI_NODE, GPU_BOUND), _DENSE),
            (GPU, MULTI_NODE, GPU_BOUND), needs="several nodes: e.g. 8 x 8 H100 and 4 x 8 H200, the same dense "
            "configuration, >= 3 repetitions each (the single-node per-GPU ratio is shown in detail, never judged: "
            "it cannot answer a claim about clusters)"),
    Finding("h200_energy_per_token",
            "H200 wins on energy efficiency in communication-bound configurations (Mixtral-8x22B EP8-TP1-PP4, "
            "GPT3-175B TP2-PP16).",
            "direction only", "[S3, unverified]", "H200 vs H100 comparison",
            "energy per token, H200 / H100, the same multi-node configuration (below 1: H200 more efficient)", "x",
            Claim(-1, 1.0, 0.02),
            ck.cluster_ratio(("energy_per_token_j",), "h200", "h100", 1.0, "no configuration measured on several "
                             "nodes of both H200 and H100 (the claim is about communication-bound jobs over nodes)",
                             (GPU, MULTI_NODE, COMM_BOUND)),
            (GPU, MULTI_NODE, COMM_BOUND), needs="several nodes of each: the study's 4-8-node configurations, "
            "traced (exposed communication >= 20% of the step), >= 3 repetitions"),
    Finding("tp_pp_underuse_pcie",
            "TP combined with PP produces sparse, uncoordinated SendRecv that under-utilises PCIe/NIC bandwidth.",
            "qualitative", "[Abs; S3]", "Fig. 5",
            "", "", Claim(+1),
            ck.unmeasured("inter-node traffic: one node has no NIC traffic, and the NVML PCIe byte counters are not "
                          "trusted here (docs/findings.md, 'PCIe byte counters')"),
            needs="several nodes with InfiniBand counters", measurable=False),
    Finding("thermal_aware_placement",
            "Thermal-aware / asymmetric pipeline-stage placement: +4% efficiency on Llama3-70B (PP4, 21/19 layers), "
            "-7% on GPT3-175B (PP8, 13/11).",
            "+4% / -7% efficiency", "[S3; S1 '4-7%']", "Sec. 6",
            "efficiency change of `thermal` placement vs `default`, pipelines with pp >= 4, same configuration "
            "otherwise but the split (the study's +4%: compatible range 2-8%)", "%",
            Claim(+1, 0.0, 1.0, size=(2.0, 8.0)),
            ck.knob(("efficiency",), "placement", lambda v: v == "thermal", lambda v: v in (None, "default"),
                    "placement (thermal / default)", "no `thermal` vs `default` placement pair of a pipeline with pp "
                    ">= 4 (`balanced` is a load-balance split, not thermal-aware)", _SPEED_STEADY, _DEEP_PP,
                    ratio=True, also=("pp_split",), to=_pct, scale="linear"),
            _SPEED_STEADY, needs="4 GPUs of one node: the study's PP4 case (Llama-3 8B, 32 layers, `thermal` with the "
            "asymmetric 9/7/9/7 split vs `default`), >= 5 interleaved repetitions, steady, GPU-bound"),
    Finding("power_fault_straggler",
            "A node power-delivery fault made GPUs run >4x slower (stragglers).",
            ">4x slower", "[S2; S3]", "observed event",
            "", "", Claim(+1), ck.unmeasured("an observed fault, not a designed experiment"),
            needs="not measurable: a run during a power-delivery fault (lowering one GPU's power limit to emulate "
            "it is not allowed on the machines used here)", measurable=False),
    Finding("lora_lower_power",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            "lower power", "[S2]", "LoRA section",
            "average GPU power, LoRA / full training of the same model and layout (below 1: lower)", "x",
            Claim(-1, 1.0, 0.02),
            ck.knob(("power_avg_w",), "kind", _is_lora, _is_full, "kind (lora / train)", "no LoRA / full-training "
                    "pair of one model and layout (kind: lora)", _THERMAL, ratio=True),
            _THERMAL, needs="1 GPU: LoRA and full training of Llama-3 8B (8 layers) in a configuration whose full "
            "training stays below the power cap (shorter sequence or fewer layers), >= 3 interleaved repetitions, "
            "steady"),
    Finding("lora_lower_temp",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            "lower temperature", "[S2]", "LoRA section",
            "mean GPU temperature, LoRA - full training of the same model and layout", "degC",
            Claim(-1, 0.0, TEMP_RESOLUTION_C),
            ck.knob(("temp_avg_c",), "kind", _is_lora, _is_full, "kind (lora - train)", "no LoRA / full-training pair "
                    "of one model and layout (kind: lora)", _THERMAL),
            _THERMAL, needs="1 GPU: as lora_lower_power"),
    Finding("lora_efficiency_10x",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            ">10x efficiency", "[S2]", "LoRA section",
            "the study's efficiency (samples per s per MJ of one iteration, proportional to 1/(P x T^2); not tokens "
            "per joule), LoRA / full training of the same model and layout", "x",
            Claim(+1, 1.0, 0.02, size=(10.0, math.inf)),
            ck.knob(("efficiency",), "kind", _is_lora, _is_full, "kind (lora / train)", "no LoRA / full-training "
                    "pair of one model and layout (kind: lora)", _SPEED_STEADY, ratio=True,
                    secondary=ck.Secondary("energy_per_token_j", "tokens per joule", ratio=True, inverse=True)),
            _SPEED_STEADY, needs="several nodes for the study's size (data-parallel LoRA over a network, or its "
            "shorter fine-tuning sequences); the direction on 1 GPU: as lora_lower_power",
            size_regime=MULTI_NODE, size_regime_why=_ONE_NODE_LORA),
    Finding("mi250_package_skew",
            "MI250: 5-10 degC temperature skew between the two dies of one package.",
            "5-10 degC", "[S2]", "MI250 section",
            "", "", Claim(+1), ck.unmeasured("no AMD MI250 measurement"), needs="not measurable here: MI250 GPUs",
            measurable=False),
)


#: how each measurable finding's noise is read from the committed sets (docs/findings.md, "Reachability"): the
#: metric (a runs column, or ``share:<what>`` of the kernel trace), the scale its interval is made on (``pct_log``:
#: a ratio shown as a % change) and the design (calorimeter.findings.reach.DESIGNS)
NOISE: dict[str, tuple[str, str, str]] = {
    "overlap_raises_peak_temp": ("temp_peak_c", "linear", "pair"),
    "overlap_raises_throttling": ("sm_clock_avg_mhz", "linear", "pair"),
    "recompute_less_throttling_deep_pp": ("sm_clock_avg_mhz", "linear", "pair"),
    "recompute_more_throttling_dp": ("sm_clock_avg_mhz", "linear", "pair"),
    "microbatch_raises_peak_power": ("power_peak_w", "linear", "slope"),
    "microbatch_raises_peak_temp": ("temp_peak_c", "linear", "slope"),
    "microbatch_speeds_up_fsdp": ("tokens_per_s", "log", "pair"),
    "microbatch_no_gain_pp": ("tokens_per_s", "log", "slope"),
    "deep_pp_throttles_more": ("sm_clock_avg_mhz", "linear", "slope"),
    "gpus_thermally_asymmetric": ("", "linear", "machines"),
    "hot_gpus_clock_lower": ("", "linear", "machines"),
    "dense_compute_share_over_half": ("share:gemm_attention", "logit", "level"),
    "moe_tp_comm_share_over_half": ("share:comm", "logit", "level"),
    "h100_scale_out_wins_compute_bound": ("tokens_per_s", "log", "pair"),
    "h200_energy_per_token": ("energy_per_token_j", "log", "pair"),
    "thermal_aware_placement": ("efficiency", "pct_log", "pair"),
    "lora_lower_power": ("power_avg_w", "log", "pair"),
    "lora_lower_temp": ("temp_avg_c", "linear", "pair"),
    "lora_efficiency_10x": ("efficiency", "log", "pair"),
}


def finding_ids() -> list[str]:
    """Ids in catalogue order."""
    return [f.id for f in FINDINGS]
