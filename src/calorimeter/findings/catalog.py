"""The study's findings, each as a computed check on a sweep's tables, with its claim and its preconditions.

Each ``Finding`` carries the study's statement and number with their provenance tags (shared notes
``paper-findings.md``: [A] artifact, [Abs] abstract, [S1]-[S5] secondary sources, [I] inference), the
:class:`~calorimeter.findings.stats.Claim` the verdict judges (direction, tolerance, stated size) and a check that
turns the sweep's tables into an ``Evidence``: an effect with its interval over repetitions of the cells that meet
the finding's preconditions (:mod:`calorimeter.findings.preconditions`), or why the sweep cannot answer.

"Throttling" is read, as in the study's figures, from the mean SM clock over the measured steps (a lower clock is
more throttling), only on cells that sit at the power cap below the clock ceiling; peak temperature and power are
the maximum over the cell's GPUs of each GPU's peak, only on steady measured windows.

The catalogue is versioned (:data:`CATALOG_VERSION`, written into ``findings.csv``); :data:`CATALOG_CHANGES` says
what each version changed. A change of a check re-evaluates every committed reference set (docs/findings.md lists
the verdicts that changed); data and the check that decides on it never land in the same commit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from calorimeter.findings import checks as ck
from calorimeter.findings.checks import TEMP_RESOLUTION_C, Evidence, Tables
from calorimeter.findings.preconditions import (
    BELOW_POWER_CAP,
    CLOCK_STEP_MHZ,
    COMM_BOUND,
    GPU,
    MULTI_NODE,
    POWER_CAPPED,
    REAL_MODEL,
    STEADY,
    Precondition,
)
from calorimeter.findings.select import LAYOUT_PARAMS, column
from calorimeter.findings.stats import Claim
from calorimeter.plan.models import CATALOGUE

#: the catalogue's version, written into every ``findings.csv``
CATALOG_VERSION = 4
#: what each version changed (docs/findings.md has the verdicts each change moved)
CATALOG_CHANGES = {
    1: "the first catalogue (findings.csv without a catalog_version column)",
    2: "symmetric verdicts with sizes and >= 2 degrees of freedom; repetitions as the experimental unit; "
       "preconditions (steady windows, power cap below the clock ceiling, the claim's regime); the cross-hardware "
       "findings judged on clusters over nodes; asymmetry on a held-out hot GPU against the study's 27%; FSDP judged "
       "on micro-batch 1 -> 4 against >3x; placement only `thermal` vs `default`; LoRA findings",
    3: "LoRA's lower power and temperature judged only on cells below the power cap (at the cap the limit, not the "
       "load, sets both: two capped cells can only read 'no change')",
    4: "a host is a physical machine, told apart by its GPUs' NVML UUIDs, not by hostname (lent machines are all "
       "called 'vm': cells of two machines read as one host in the asymmetry finding)",
}

__all__ = ["CATALOG_CHANGES", "CATALOG_VERSION", "FINDINGS", "Evidence", "Finding", "Tables", "finding_ids"]


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
            "8 GPUs of one node", "several nodes", or "not measurable").
        measurable: whether calorimeter can measure it at all (False: always *cannot say*, with why).
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

    @property
    def sign(self) -> int:
        """The claimed direction (+1 above, -1 below ``threshold``)."""
        return self.rule.sign

    @property
    def threshold(self) -> float:
        """The no-effect value of the claim."""
        return self.rule.null


def overlap_effective(df: pd.DataFrame) -> pd.Series:
    """Rows where ``overlap`` changes anything (docs/knobs.md): ZeRO's overlapped reduction and prefetch need dp > 1;
    the tensor-parallel overlap needs tp > 1 with sequence parallelism."""
    sp = df["sequence_parallel"].fillna(False).astype(bool) if "sequence_parallel" in df.columns else False
    return ((column(df, "zero_stage") >= 1) & (column(df, "dp") > 1)) | ((column(df, "tp") > 1) & sp)


def is_moe(df: pd.DataFrame) -> pd.Series:
    """Rows of a mixture-of-experts model."""
    return df["model"].map(lambda m: CATALOGUE[m].is_moe if m in CATALOGUE else "mixtral" in str(m))


#: data-parallel / FSDP layouts: no pipeline (one GPU is their dp = 1 limit: the same work per GPU, no stages)
_DP = lambda d: column(d, "pp") == 1  # noqa: E731
_DEEP_PP = lambda d: column(d, "pp") >= 4  # noqa: E731 - "deep" pipelines (the study's are 16-32 stages)
_FSDP = lambda d: (column(d, "pp") == 1) & (column(d, "zero_stage") == 3)  # noqa: E731
_PP = lambda d: column(d, "pp") > 1  # noqa: E731
_MULTI = lambda d: column(d, "world_size") > 1  # noqa: E731 - one GPU has nothing to communicate
_DENSE = lambda d: ~is_moe(d)  # noqa: E731
_LORA_OR_FULL = ("kind", "lora_rank", "lora_alpha", "lora_targets")
_is_lora = lambda v: v == "lora"  # noqa: E731
_is_full = lambda v: v in (None, "train")  # noqa: E731
_pct = lambda v: (v - 1.0) * 100.0  # noqa: E731 - a ratio as a % change


def _deep_regime(g: list) -> bool:
    return max(c.params.get("pp") or 1 for c in g) >= 4


#: a pipeline-depth group varies the tp x pp layout (and SP, splits) at a fixed data-parallel degree
_LAYOUT_BUT_PP = tuple(p for p in LAYOUT_PARAMS if p not in ("dp", "pp"))
_OVERLAP_NEEDS = "overlap on/off pairs where overlap acts (ZeRO with dp > 1, or tp > 1 with sequence parallelism)"
_STEADY_T = (GPU, STEADY)
_UNCAPPED_T = (GPU, STEADY, BELOW_POWER_CAP)  # where power and temperature are free to follow the load
_CLOCK = (GPU, POWER_CAPPED)

FINDINGS: tuple[Finding, ...] = (
    Finding("overlap_raises_peak_temp",
            "Compute-communication overlap (cc) consistently raises peak GPU temperature.",
            "direction only (no value recovered)", "[S2]", "Fig. 8",
            "peak GPU temperature, overlap on - off, same configuration otherwise", "degC",
            Claim(+1, 0.0, TEMP_RESOLUTION_C),
            ck.knob(("temp_peak_c",), "overlap", bool, lambda v: not bool(v), "overlap (on - off)",
                    f"no {_OVERLAP_NEEDS}", _STEADY_T, overlap_effective, resolution=TEMP_RESOLUTION_C),
            _STEADY_T, needs="2 GPUs of one node: >= 3 interleaved repetitions of overlap on/off (ZeRO-3 dp2, TP2+SP) "
            "with warmup: steady at the power cap; the study's TP8 cc needs 8 GPUs"),
    Finding("overlap_raises_throttling",
            "Overlap raises throttling (lower SM clock).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, overlap on - off (negative = more throttling)", "MHz", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "overlap", bool, lambda v: not bool(v), "overlap (on - off)",
                    f"no {_OVERLAP_NEEDS}", _CLOCK, overlap_effective),
            _CLOCK, needs="2 GPUs of one node: overlap on/off repetitions at the power cap (steady)"),
    Finding("recompute_less_throttling_deep_pp",
            "Activation recomputation reduces throttling in deep-pipeline configurations (GPT3-175B, PP16-32).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, layouts with pp >= 4 (positive = less throttling)", "MHz",
            Claim(+1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "recompute", lambda v: v == "full", lambda v: v == "none",
                    "recompute (full - none)", "no recompute full/none pair of a layout with pp >= 4", _CLOCK,
                    _DEEP_PP, also=("recompute_layers",)),
            _CLOCK, needs="8 GPUs of one node (PP4-PP8 with and without recompute, repeated, at the power cap); the "
            "study's PP16-32 needs several nodes"),
    Finding("recompute_more_throttling_dp",
            "... but increases throttling in data-parallel / FSDP configurations (Llama3-70B).",
            "direction only", "[S2]", "Fig. 8",
            "mean SM clock, recompute full - none, layouts without a pipeline (pp = 1: data-parallel, FSDP, or one "
            "GPU) (negative = more throttling)", "MHz",
            Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.knob(("sm_clock_avg_mhz",), "recompute", lambda v: v == "full", lambda v: v == "none",
                    "recompute (full - none)", "no recompute full/none pair of a layout without a pipeline (pp = 1)",
                    _CLOCK, _DP, also=("recompute_layers",)),
            _CLOCK, needs="1 GPU (the dp = 1 limit) or 2 GPUs of one node (ZeRO-3 dp2): recompute none/full, >= 3 "
            "repetitions, at the power cap below the clock ceiling"),
    Finding("microbatch_raises_peak_power",
            "Peak power rises with micro-batch size, whether or not throughput improves.",
            "direction only", "[Abs; S2]", "Fig. 13",
            "peak GPU power per doubling of the micro-batch (slope within configurations, per repetition)",
            "W/doubling", Claim(+1, 0.0, 5.0),
            ck.slope(("power_peak_w",), "micro_batch", "", "no configuration measured at two or more micro-batch "
                     "sizes", _STEADY_T),
            _STEADY_T, needs="1 GPU: micro-batch 1/2/4 of one configuration, >= 3 interleaved repetitions, steady"),
    Finding("microbatch_raises_peak_temp",
            "Peak temperature rises with micro-batch size.",
            "direction only", "[S2; S3]", "Fig. 13",
            "peak GPU temperature per doubling of the micro-batch (per repetition)", "degC/doubling",
            Claim(+1, 0.0, 0.5),
            ck.slope(("temp_peak_c",), "micro_batch", "", "no configuration measured at two or more micro-batch "
                     "sizes", _STEADY_T, resolution=TEMP_RESOLUTION_C),
            _STEADY_T, needs="1 GPU: micro-batch 1/2/4 of one configuration, >= 3 interleaved repetitions, steady"),
    Finding("microbatch_speeds_up_fsdp",
            "Larger micro-batches speed FSDP up: GPT3-175B TP8-FSDP, micro-batch 1 -> 4 gives a >3x step-time "
            "speed-up.",
            ">3x from mb 1 to 4", "[S3, unverified]", "Fig. 13",
            "tokens/s, micro-batch 4 / micro-batch 1, FSDP (ZeRO-3, pp = 1) configurations", "x",
            Claim(+1, 1.0, 0.02, size=(3.0, math.inf)),
            ck.knob(("tokens_per_s",), "micro_batch", lambda v: v == 4, lambda v: v == 1, "micro-batch (4 / 1)",
                    "no FSDP (ZeRO-3, pp = 1) configuration measured at micro-batch 1 and 4", (GPU,), _FSDP,
                    ratio=True, scale="log"),
            (GPU,), needs="2 GPUs of one node: ZeRO-3 dp2 micro-batch 1 and 4 at one global batch, >= 3 repetitions; "
            "the study's TP8-FSDP of GPT3-175B needs several nodes"),
    Finding("microbatch_no_gain_pp",
            "In pipeline-heavy configurations (TP2-PP16) the micro-batch benefit vanishes or reverses.",
            "<= 1x", "[S3, unverified]", "Fig. 13",
            "tokens/s ratio per doubling of the micro-batch, pipeline (pp > 1) configurations (no gain: <= 1.02x)",
            "x/doubling", Claim(-1, 1.02, 0.0),
            ck.slope(("tokens_per_s",), "micro_batch", " (pp > 1)", "no pipeline (pp > 1) configuration measured "
                     "at two or more micro-batch sizes", (GPU,), _PP, log=True),
            (GPU,), needs="2 GPUs of one node (PP2 micro-batch sweep, repeated); the study's TP2-PP16 needs several "
            "nodes"),
    Finding("deep_pp_throttles_more",
            "Deep pipelines throttle more than TP-heavy configurations.",
            "direction only (PP16-32 vs TP8)", "[S2]", "Fig. 4",
            "mean SM clock per doubling of pipeline depth across tp x pp layouts of one model reaching pp >= 4 "
            "(negative = deeper pipelines throttle more)", "MHz/doubling", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.slope(("sm_clock_avg_mhz",), "pp", "", "no model measured over two or more pipeline depths (tp x pp "
                     "layouts, everything else fixed)", _CLOCK,
                     lambda d: (column(d, "zero_stage") < 3) & (column(d, "ep") <= 1), hold=_LAYOUT_BUT_PP,
                     regime=_deep_regime, regime_missing="no layout group reaching pp >= 4 (PP2 is not a deep "
                     "pipeline)"),
            _CLOCK, needs="8 GPUs of one node: TP8, TP4-PP2, TP2-PP4, TP1-PP8 with >= 3 interleaved repetitions at "
            "the power cap; PP16-32 needs several nodes"),
    Finding("gpus_thermally_asymmetric",
            "Air-cooled HGX nodes are thermally asymmetric: rear GPUs run up to 27% hotter than front GPUs.",
            "up to 27%", "[S2]", "Fig. 17 / Sec. 6",
            "(hot - cool) / cool mean GPU temperature within a node, hot and cool GPU chosen on other cells "
            "(symmetric pp = 1 cells, steady)", "%", Claim(+1, 0.0, 2.0, size=(0.0, 27.0)),
            ck.asymmetry(_STEADY_T, "no steady symmetric cell (pp = 1) with two or more GPUs of one node and GPU "
                         "temperatures"),
            _STEADY_T, needs="2 GPUs of one node for this host's offset (>= 3 steady symmetric cells); HGX nodes in "
            "general: several 8-GPU hosts with the GPUs' positions in the airflow known (bare metal)"),
    Finding("hot_gpus_clock_lower",
            "Hotter GPUs run at reduced clocks.",
            "direction only", "[S2]", "Fig. 17 / Sec. 6",
            "mean SM clock of the hottest - the coolest GPU of a node, symmetric (pp = 1) cells, steady, at the power "
            "cap", "MHz", Claim(-1, 0.0, CLOCK_STEP_MHZ),
            ck.hot_clock((GPU, STEADY, POWER_CAPPED), "no steady symmetric cell (pp = 1) at the power cap with two "
                         "or more GPUs of one node, temperatures and clocks"),
            (GPU, STEADY, POWER_CAPPED), needs="2 GPUs of one node: >= 3 steady symmetric cells at the power cap "
            "(8 GPUs give 28 pairs per cell)"),
    Finding("dense_compute_share_over_half",
            "In dense models (Llama3-70B) compute kernels are always more than 50% of kernel time.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "compute (non-communication) share of summed kernel time of the profiled step, dense configuration with "
            "the lowest share", "fraction", Claim(+1, 0.5, 0.02),
            ck.kernel_share(False, ck._and(_DENSE, _MULTI), (GPU, REAL_MODEL), "no traced dense cell on two GPUs or "
                            "more", pick_max=False),
            (GPU, REAL_MODEL), needs="2 GPUs of one node: >= 3 traced repetitions of each layout, all ranks traced; "
            "the study's inter-node shares need several nodes"),
    Finding("moe_tp_comm_share_over_half",
            "Mixtral-8x22B EP8-TP4-PP1 spends more than 50% of kernel time in communication kernels.",
            "> 50%", "[S3, unverified]", "Fig. 10",
            "communication share of summed kernel time, MoE configuration with tp > 1 with the highest share",
            "fraction", Claim(+1, 0.5, 0.02),
            ck.kernel_share(True, ck._and(is_moe, _MULTI, lambda d: column(d, "tp") > 1), (GPU, REAL_MODEL),
                            "no traced MoE cell with tp > 1", pick_max=True),
            (GPU, REAL_MODEL), needs="traced, repeated Mixtral cells with tp > 1 (direction: 2-8 GPUs of one node); "
            "EP8-TP4 needs 32 GPUs over several nodes"),
    Finding("h100_scale_out_wins_compute_bound",
            "64 H100 (scale-out) beat 32 H200 (scale-up) for compute-bound dense models (Llama3-70B).",
            "direction only", "[Abs; S3, unverified]", "H200 vs H100 comparison",
            "tokens/s of a multi-node H100 job / the same configuration on half as many H200 (dense model)", "x",
            Claim(+1, 1.0, 0.02),
            ck.cluster_ratio(("tokens_per_s",), "h100", "h200", 2.0, "no dense configuration measured on several "
                             "nodes of H100 and on half as many H200", (GPU, MULTI_NODE), _DENSE),
            (GPU, MULTI_NODE), needs="several nodes: e.g. 8 x 8 H100 and 4 x 8 H200, the same dense configuration, "
            ">= 3 repetitions each (the single-node per-GPU ratio is shown in detail, never judged: it cannot "
            "answer a claim about clusters)"),
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
            "efficiency change of `thermal` placement vs `default`, pipeline layouts, same configuration otherwise "
            "(the study's +4%: compatible range 2-8%)", "%", Claim(+1, 0.0, 1.0, size=(2.0, 8.0)),
            ck.knob(("efficiency",), "placement", lambda v: v == "thermal", lambda v: v in (None, "default"),
                    "placement (thermal / default)", "no `thermal` vs `default` placement pair of a pipeline layout "
                    "(`balanced` is a load-balance split, not thermal-aware)", _STEADY_T, _PP, ratio=True,
                    to=_pct, scale="linear"),
            _STEADY_T, needs="4-8 GPUs of one node with a real thermal spread: PP >= 4, `thermal` vs `default`, >= 3 "
            "interleaved repetitions, steady"),
    Finding("power_fault_straggler",
            "A node power-delivery fault made GPUs run >4x slower (stragglers).",
            ">4x slower", "[S2; S3]", "observed event",
            "", "", Claim(+1), ck.unmeasured("an observed fault, not a designed experiment"),
            needs="not measurable: a run during a power-delivery fault (lowering one GPU's power limit to emulate "
            "it is forbidden on the lent machines)", measurable=False),
    Finding("lora_lower_power",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            "lower power", "[S2]", "LoRA section",
            "average GPU power, LoRA / full training of the same model and layout (below 1: lower)", "x",
            Claim(-1, 1.0, 0.02),
            ck.knob(("power_avg_w",), "kind", _is_lora, _is_full, "kind (lora / train)", "no LoRA / full-training "
                    "pair of one model and layout (kind: lora)", _UNCAPPED_T, ratio=True, also=_LORA_OR_FULL[1:]),
            _UNCAPPED_T, needs="1 GPU: LoRA and full training of Llama-3 8B (8 layers) in a configuration whose full "
            "training stays below the power cap (shorter sequence or fewer layers), >= 3 interleaved repetitions, "
            "steady"),
    Finding("lora_lower_temp",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            "lower temperature", "[S2]", "LoRA section",
            "mean GPU temperature, LoRA - full training of the same model and layout", "degC",
            Claim(-1, 0.0, TEMP_RESOLUTION_C),
            ck.knob(("temp_avg_c",), "kind", _is_lora, _is_full, "kind (lora - train)", "no LoRA / full-training pair "
                    "of one model and layout (kind: lora)", _UNCAPPED_T, also=_LORA_OR_FULL[1:]),
            _UNCAPPED_T, needs="1 GPU: as lora_lower_power"),
    Finding("lora_efficiency_10x",
            "LoRA fine-tuning lowers power and temperature and gives >10x training efficiency.",
            ">10x efficiency", "[S2]", "LoRA section",
            "efficiency (samples per s per MJ), LoRA / full training of the same model and layout", "x",
            Claim(+1, 1.0, 0.02, size=(10.0, math.inf)),
            ck.knob(("efficiency",), "kind", _is_lora, _is_full, "kind (lora / train)", "no LoRA / full-training "
                    "pair of one model and layout (kind: lora)", _STEADY_T, ratio=True, also=_LORA_OR_FULL[1:]),
            _STEADY_T, needs="1 GPU: as lora_lower_power"),
    Finding("mi250_package_skew",
            "MI250: 5-10 degC temperature skew between the two dies of one package.",
            "5-10 degC", "[S2]", "MI250 section",
            "", "", Claim(+1), ck.unmeasured("no AMD MI250 measurement"), needs="not measurable here: MI250 GPUs",
            measurable=False),
)


def finding_ids() -> list[str]:
    """Ids in catalogue order."""
    return [f.id for f in FINDINGS]
