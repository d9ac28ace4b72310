"""Project one planned cell: iteration time, throughput, MFU, power, energy and the time split, with provenance.

Every projected row carries ``source = "projected"`` and says what is calibrated (fitted on which GPU type and how
many measured cells) and what is assumed (inter-node links from the hardware profile, a GPU type without its own
measurements, group sizes never measured). Rows are never mixed with measured ones: the workflow writes them to
``projection/projected.parquet``, apart from ``tables/runs.parquet``.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.work import COLLECTIVES, workload
from calorimeter.projection.calibration import Calibration, range_values
from calorimeter.projection.collectives import CollectiveCurves, Network, NetworkOverride
from calorimeter.projection.compute import COMPUTE_CATEGORIES
from calorimeter.projection.fingerprint import Fingerprint
from calorimeter.projection.regimes import (
    BandChoice,
    Regime,
    choose_band,
    machine_class,
    regime_columns,
    regime_of,
)
from calorimeter.projection.schedule import pipeline_time, stage_time, untimed_schedule
from calorimeter.records.metrics import energy_metrics, throughput_metrics

SOURCE = "projected"
#: metrics that get an error band: ``<metric>_low``/``_high`` hold the measured value's interval at the stated
#: coverage (a relative error ``e = predicted / measured - 1`` within ``+-b`` puts the measured value within
#: ``[predicted / (1 + b), predicted / (1 - b)]``)
BANDED = ("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "power_avg_w", "energy_per_token_j")
#: the numbers a refused row does not carry (NaN: :attr:`Projector.refuse`)
NUMERIC_RESULTS: tuple[str, ...] = (
    "iteration_time_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
    "model_tflops_per_gpu", "mfu_full", "mfu_causal", "hfu", "power_avg_w", "power_total_avg_w",
    "energy_per_iteration_j", "energy_per_token_j", "efficiency", "t_optimizer_s",
    "t_host_gap_s", "t_bubble_s", *(f"t_{c}_s" for c in COMPUTE_CATEGORIES),
    *(f"t_{p}_{k}_s" for k in COLLECTIVES for p in ("exposed", "comm")))
#: a projected cell whose host gaps take more than this share of the iteration is flagged host-bound (the measured
#: cells' definition: GPU busy < 80%)
HOST_BOUND_GAP_FRAC = 0.20


def tp_overlap_mechanism(cell: Cell) -> str:
    """The TP overlap mechanism the engine uses for a cell (train/tp_overlap.py): the cell's ``tp_overlap`` where it
    sets one, else ``auto``: ``symm_mem`` where the tensor-parallel group is NCCL on one host, ``ring`` across hosts;
    ``none`` without tp > 1 and overlap."""
    if not (cell.overlap and cell.tp > 1):
        return "none"
    if cell.tp_comm_overlap:
        return cell.tp_comm_overlap
    return "symm_mem" if cell.tp <= cell.gpus_per_node else "ring"


def band_interval(value: float, half: float) -> tuple[float, float]:
    """The measured value's interval for a prediction ``value`` with relative error band ``+-half``."""
    if half != half or value != value:
        return math.nan, math.nan
    return value / (1.0 + half), (value / (1.0 - half) if half < 1.0 else math.inf)


def extrapolation_band(regime_band: float, cross_error: float) -> float:
    """The band of a row projected with another engine build's or GPU type's calibration: its regimes' band plus the
    calibration's measured error on another fingerprint's or GPU type's cells (``Calibration.cross_fingerprint_error``).
    (Rows outside the calibration's range take their extrapolation regime's measured band instead:
    :mod:`calorimeter.projection.regimes`.)"""
    return regime_band + cross_error


class Projector:
    """Projects cells with one calibration (one GPU type, one engine fingerprint) and one inter-node network.

    Args:
        calibration: the calibration.
        network: inter-node override (``projection.network``).
        relation: how the calibration relates to the engine projected for: ``match`` (same fingerprint and GPU
            type), ``foreign`` (another engine build of the same GPU type) or ``other-gpu`` (another GPU type's):
            the latter two say so in ``assumed`` and widen the bands by the measured cross-fingerprint error.
        target: a description of the engine projected for (for ``assumed``).
        refuse: a row in a regime without a measured band (``refused`` says which and why) carries no numbers
            (NaN); False (the validation, measuring the errors those bands are made of) keeps them.
    """

    def __init__(self, calibration: Calibration, network: NetworkOverride | None = None, relation: str = "match",
                 target: str = "", refuse: bool = True) -> None:
        self.cal = calibration
        self.network_override = network or None
        self.relation = relation
        self.target = target
        self.refuse = refuse
        self._curves: dict[str, CollectiveCurves] = {}

    def curves(self, hardware: str) -> CollectiveCurves:
        """Collective curves for a hardware profile (the calibration's points, that profile's links)."""
        if hardware not in self._curves:
            hw = get_profile(hardware)
            self._curves[hardware] = CollectiveCurves(self.cal.curves, hw,
                                                      Network.from_profile(hw, self.network_override))
        return self._curves[hardware]

    def project(self, cell: Cell, machine: str | None = None) -> dict[str, Any]:
        """The projected row of one cell.

        Args:
            machine: the machine it will run on (:func:`calorimeter.records.machines.machine_keys`): its host factor
                where the calibration has one, else (and with None) an average calibrated host.
        """
        cal = self.cal
        hw = get_profile(cell.hardware)
        curves = self.curves(cell.hardware)
        w = workload(cell)
        comm_sources: set[str] = set()
        stage_times = []
        opt_coef = cal.compute.coef["memory_elementwise"].get("optim_elems", 0.0)
        mech = tp_overlap_mechanism(cell)
        tp_hidden = cal.tp_hidden.get(mech, 0.0) if mech != "none" else 0.0
        for st in w.stages:
            compute = cal.compute.seconds(st)
            ops = []
            for op in st.comm:
                t, src = curves.op_time(op)
                if op.group > 1:
                    comm_sources.add(f"{op.collective}/{op.role}: {src}")
                ops.append((op, t))
            stage_times.append(stage_time(st.stage, st.micro_batches, compute,
                                          opt_coef * st.features.get("optim_elems", 0.0), ops, cell.overlap,
                                          cal.compute.host_gap_s(st, machine), tp_hidden,
                                          cal.compute.launch_s(st, mech, machine),
                                          cal.compute.z3_host_s(st, mech, machine)))
        it = pipeline_time(stage_times)
        t = it.iteration_s
        row: dict[str, Any] = {**cell.to_dict(), "source": SOURCE, "status": SOURCE, "iteration_time_s": t}
        row.update(_throughput(cell, t, hw.peak_bf16_tflops))
        crit = it.stages[it.critical_stage]
        m = crit.micro_batches
        for cat in COMPUTE_CATEGORIES:
            row[f"t_{cat}_s"] = crit.compute_s[cat]
        row["t_optimizer_s"] = crit.optimizer_s
        for kind in COLLECTIVES:
            row[f"t_exposed_{kind}_s"] = crit.comm_exposed_s[kind] + crit.step_exposed_s.get(kind, 0.0)
            row[f"t_comm_{kind}_s"] = crit.comm_busy_s[kind]
        row["t_host_gap_s"] = crit.host_gap_s[0] + crit.host_gap_s[1] + crit.launch_wait_s
        row["t_bubble_s"] = it.bubble_s
        row["critical_stage"] = it.critical_stage
        row["micro_batches"] = m
        row.update(self._power(cell, it, t))
        row.update(self._provenance(cell, comm_sources, mech))
        row["tp_overlap"] = mech
        row["host_bound"] = bool(t > 0 and row["t_host_gap_s"] / t > HOST_BOUND_GAP_FRAC)
        row["machine"] = machine or ""
        row["host_factor"] = cal.compute.machine_factor(machine)
        if row["host_bound"]:
            key = "calibrated" if machine in cal.compute.host_factor else "assumed"
            row[key] = "; ".join(x for x in (row[key], self._host_note(machine)) if x)
        outside = self._outside(cell)
        row["extrapolated"] = bool(outside)
        row["extrapolated_parts"] = "; ".join(outside)
        regime = regime_of(range_values(cell), cal.ranges, row["host_bound"], cell.nodes)
        row.update(regime_columns(regime))
        row["machine_class"] = machine_class(cell, hw, curves.network)
        if regime.inter_node:
            row["assumed"] = "; ".join(x for x in (row["assumed"], (
                f"inter-node links ({curves.network.source}) never measured: the band does not cover their "
                "error")) if x)
        row["band_coverage"] = cal.coverage.get("stated", math.nan)
        refused = ""
        untimed = untimed_schedule(cell.pp_schedule)
        for key in BANDED:
            choice = BandChoice(math.nan, "", untimed) if untimed else self.band(key, regime)
            refused = refused or choice.refused
            row[f"{key}_band"] = choice.half
            if key == "tokens_per_s_per_gpu":
                row["band_basis"] = choice.basis
        row["refused"] = refused
        if refused and self.refuse:
            for key in NUMERIC_RESULTS:
                if key in row:
                    row[key] = math.nan
        for key in BANDED:
            row[f"{key}_low"], row[f"{key}_high"] = band_interval(row.get(key, math.nan), row[f"{key}_band"])
        return row

    def _host_note(self, machine: str | None) -> str:
        """What a host-bound row's host speed rests on."""
        f = self.cal.compute.host_factor
        if machine in f:
            return (f"host speed: machine {machine} at {f[machine]:.2f}x an average calibrated host (from its "
                    "host-bound cells)")
        spread = (f"the {len(f)} calibrated machines span {max(f.values()) / min(f.values()):.2f}x" if len(f) > 1
                  else "machines never told apart in the calibration")
        return ("host speed: an average calibrated host (" + (f"machine {machine} has no host-bound calibration cell"
                if machine else "machine not given") + f", {spread})")

    def band(self, metric: str, regime: Regime) -> BandChoice:
        """A row's band for ``metric``: the widest measured band of its regimes, at least its base regime's spread
        between machines (:func:`~calorimeter.projection.regimes.choose_band`), plus the measured cross-fingerprint
        error when the calibration is not the engine's own (NaN where that was never measured: no band claimed)."""
        cal = self.cal
        if not cal.regime_bands:
            return BandChoice(math.nan, "calibration never validated", "")
        choice = choose_band(regime, cal.regime_bands, metric, cal.machine_spread.get(regime.base))
        if self.relation == "match" or choice.refused:
            return choice
        half = extrapolation_band(choice.half, cal.cross_fingerprint_error.get(metric, math.nan))
        return BandChoice(half, f"{choice.basis} + cross-fingerprint error", "")

    def _outside(self, cell: Cell) -> list[str]:
        """The calibration-range keys this cell lies outside of."""
        out = []
        for k, v in range_values(cell).items():
            lo_hi = self.cal.ranges.get(k)
            if lo_hi and not (lo_hi[0] <= v <= lo_hi[1]):
                out.append(f"{k}={v:.4g} outside [{lo_hi[0]:.4g}, {lo_hi[1]:.4g}]")
        return out

    def _power(self, cell: Cell, it, t: float) -> dict[str, float]:
        if self.cal.power is None:
            return {"power_avg_w": math.nan, "energy_per_iteration_j": math.nan, "energy_per_token_j": math.nan}
        gpus_per_stage = cell.world_size // max(cell.pp, 1)
        total = 0.0
        for st in it.stages:
            gemm = st.compute_s["gemm_attention"]
            other = sum(v for k, v in st.compute_s.items() if k != "gemm_attention")
            comm = sum(v for k, v in st.comm_busy_s.items() if k != "send_recv" or cell.pp == 1)
            total += gpus_per_stage * self.cal.power.power_w(gemm / t, other / t, comm / t)
        energy = total * t
        return {"power_avg_w": total / cell.world_size, "power_total_avg_w": total, "energy_per_iteration_j": energy,
                **energy_metrics(energy, cell.global_batch, cell.seq_len, cell.global_batch / t)}

    def _provenance(self, cell: Cell, comm_sources: set[str], mech: str) -> RowProvenance:
        cal = self.cal
        calibrated, assumed = [], []
        same_gpu = cell.hardware == cal.hardware
        n = len(cal.cells)
        if same_gpu:
            calibrated.append(f"compute: kernel times of {n} measured {cal.hardware} cells")
            if cal.power is not None:
                calibrated.append(f"power: {cal.power.n_gpus} measured {cal.hardware} GPUs")
            if cal.machines:
                calibrated.append(f"machines: {len(cal.machines)} {cal.hardware} machines (told apart by their GPUs)")
        else:
            assumed.append(f"compute and power: {cal.hardware} calibration used for {cell.hardware} "
                           "(no calibration of that GPU type: fallback)")
        if self.relation == "foreign":
            cross = cal.cross_fingerprint_error
            assumed.append(f"engine: calibration {cal.key} ({Fingerprint.from_dict(cal.fingerprint).describe()}) "
                           f"is not the engine projected for{' (' + self.target + ')' if self.target else ''}; "
                           "bands widened by the measured cross-fingerprint error" + _cross_note(cross))
        for s in sorted(comm_sources):
            (assumed if "assumed" in s or "group " in s else calibrated).append(f"comm {s}")
        if mech != "none":
            if mech in cal.tp_hidden:
                calibrated.append(f"TP overlap {mech}: {cal.tp_hidden[mech]:.0%} of TP communication hidden, "
                                  "as measured")
            else:
                assumed.append(f"TP overlap {mech} never measured in this calibration: TP communication exposed")
        if cal.power is None:
            assumed.append("power: no calibration (NaN)")
        return {"calibrated": "; ".join(calibrated), "assumed": "; ".join(assumed),
                "calibration_hardware": cal.hardware, "calibration_cells": n, "calibration": cal.key,
                "calibration_relation": self.relation}


class RowProvenance(TypedDict):
    """What a projected row rests on: what is calibrated and what assumed (``; ``-joined), and its calibration."""

    calibrated: str
    assumed: str
    calibration_hardware: str
    calibration_cells: int
    calibration: str
    calibration_relation: str


def _cross_note(cross: dict[str, float]) -> str:
    """What an ``assumed`` note says of the cross-fingerprint error its band was widened by."""
    return f" ({', '.join(f'{k} {v:.1%}' for k, v in cross.items())})" if cross else " (never measured: bands NaN)"


def _throughput(cell: Cell, t: float, peak_tflops: float | None) -> dict[str, float]:
    """The runs table's throughput columns for an iteration time (records/metrics.py, plan/flops.py conventions)."""
    m = throughput_metrics(cell, [t], peak_tflops)
    return {k: m[k] for k in ("samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                              "model_tflops_per_gpu", "mfu_full", "mfu_causal", "hfu")}
