"""Project one planned cell: iteration time, throughput, MFU, power, energy and the time split, with provenance.

Every projected row carries ``source = "projected"`` and says what is calibrated (fitted on which GPU type and how
many measured cells) and what is assumed (inter-node links from the hardware profile, a GPU type without its own
measurements, group sizes never measured). Rows are never mixed with measured ones: the workflow writes them to
``projection/projected.parquet``, apart from ``tables/runs.parquet``.
"""

from __future__ import annotations

import math
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.work import COLLECTIVES, workload
from calorimeter.projection.calibration import Calibration
from calorimeter.projection.collectives import CollectiveCurves, Network
from calorimeter.projection.compute import COMPUTE_CATEGORIES
from calorimeter.projection.schedule import pipeline_time, stage_time
from calorimeter.records.metrics import energy_metrics, throughput_metrics

SOURCE = "projected"
#: metrics that get an error band (relative half-width from the validation)
BANDED = ("iteration_time_s", "energy_per_token_j", "power_avg_w")


class Projector:
    """Projects cells with one calibration (one GPU type) and one inter-node network."""

    def __init__(self, calibration: Calibration, network: dict | None = None) -> None:
        self.cal = calibration
        self.network_override = network or None
        self._curves: dict[str, CollectiveCurves] = {}

    def curves(self, hardware: str) -> CollectiveCurves:
        """Collective curves for a hardware profile (the calibration's points, that profile's links)."""
        if hardware not in self._curves:
            hw = get_profile(hardware)
            self._curves[hardware] = CollectiveCurves(self.cal.curves, hw,
                                                      Network.from_profile(hw, self.network_override))
        return self._curves[hardware]

    def project(self, cell: Cell) -> dict[str, Any]:
        """The projected row of one cell."""
        cal = self.cal
        hw = get_profile(cell.hardware)
        curves = self.curves(cell.hardware)
        w = workload(cell)
        comm_sources: set[str] = set()
        stage_times = []
        opt_coef = cal.compute.coef["memory_elementwise"].get("optim_elems", 0.0)
        for st in w.stages:
            compute = cal.compute.seconds(st)
            ops = []
            for op in st.comm:
                t, src = curves.op_time(op)
                if op.group > 1:
                    comm_sources.add(f"{op.kind}/{op.role}: {src}")
                ops.append((op, t))
            stage_times.append(stage_time(st.stage, st.micro_batches, compute,
                                          opt_coef * st.features.get("optim_elems", 0.0), ops, cell.overlap,
                                          cal.compute.host_gap_s(st)))
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
        row["t_host_gap_s"] = crit.host_gap_s[0] + crit.host_gap_s[1]
        row["t_bubble_s"] = it.bubble_s
        row["critical_stage"] = it.critical_stage
        row["micro_batches"] = m
        row.update(self._power(cell, it, t))
        row.update(self._provenance(cell, comm_sources))
        for key in BANDED:
            band = cal.error_band.get(key)
            value = row.get(key, math.nan)
            row[f"{key}_low"] = value * (1 - band) if band is not None else math.nan
            row[f"{key}_high"] = value * (1 + band) if band is not None else math.nan
        return row

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

    def _provenance(self, cell: Cell, comm_sources: set[str]) -> dict[str, Any]:
        cal = self.cal
        calibrated, assumed = [], []
        same_gpu = cell.hardware == cal.hardware
        n = len(cal.cells)
        if same_gpu:
            calibrated.append(f"compute: kernel times of {n} measured {cal.hardware} cells")
            if cal.power is not None:
                calibrated.append(f"power: {cal.power.n_gpus} measured {cal.hardware} GPUs")
        else:
            assumed.append(f"compute and power: {cal.hardware} calibration used for {cell.hardware} "
                           "(no measurement of that GPU)")
        for s in sorted(comm_sources):
            (assumed if "assumed" in s or "group " in s else calibrated).append(f"comm {s}")
        if cell.overlap and cell.tp > 1:
            assumed.append("tensor-parallel communication exposed (no TP overlap measured)")
        if cal.power is None:
            assumed.append("power: no calibration (NaN)")
        return {"calibrated": "; ".join(calibrated), "assumed": "; ".join(assumed),
                "calibration_hardware": cal.hardware, "calibration_cells": n}


def _throughput(cell: Cell, t: float, peak_tflops: float | None) -> dict[str, float]:
    """The runs table's throughput columns for an iteration time (records/metrics.py, plan/flops.py conventions)."""
    m = throughput_metrics(cell, [t], peak_tflops)
    return {k: m[k] for k in ("samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
                              "model_tflops_per_gpu", "mfu_full", "mfu_causal", "hfu")}
