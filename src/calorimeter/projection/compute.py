"""Compute time per kernel category, calibrated on the profiled steps' kernel times (``kernels.parquet``).

For each kernel category the summed kernel time of one rank in one iteration is modelled as a non-negative
combination of that rank's work counts (:data:`~calorimeter.plan.work.FEATURES`):

* ``gemm_attention``: seconds per dense FLOP, per executed attention FLOP, plus a ZeRO-3 contention term (dense
  FLOPs of cells whose parameter gathers run next to the GEMMs);
* ``memory_elementwise``: seconds per activation, logits, ZeRO-3-gathered, optimizer and MoE-slot element;
* ``normalization``, ``other``: seconds per activation element (and MoE-slot element).

The coefficients are fitted by non-negative least squares on relative errors, each calibration cell weighing the
same whatever its number of traced ranks. They are the measured GPU's rates under its power cap as measured
(clocks included): a projection for another GPU type needs that GPU's measurements.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from calorimeter.plan.work import FEATURES, StageWork
from calorimeter.projection.hosts import ROUNDS, fit_factors
from calorimeter.projection.schedule import tandem_host_s, tandem_idle_s

#: the compute kernel categories (telemetry/kernels.py) and the work counts each depends on
CATEGORY_FEATURES: dict[str, tuple[str, ...]] = {
    "gemm_attention": ("dense_flops", "attention_flops", "z3_flops", "layer_passes"),
    "memory_elementwise": ("act_elems", "head_elems", "head_elems_vp", "z3_elems", "optim_elems", "moe_elems",
                           "layer_passes"),
    "normalization": ("act_elems", "layer_passes"),
    "other": ("act_elems", "moe_elems", "layer_passes"),
}
COMPUTE_CATEGORIES: tuple[str, ...] = tuple(CATEGORY_FEATURES)
#: host gaps (the GPU idle between kernels while the host launches them): per iteration, per layer pass, per local
#: expert pass, per ZeRO-3 gather/reduce-scatter call (DeepSpeed's per-module hooks), per tensor-parallel collective,
#: and per tensor-parallel collective fused into its GEMM by each overlap mechanism (its workspace lookups, streams,
#: barriers and copies are host work; measured: symm_mem on small shards doubles the idle time)
HOST_FEATURES: tuple[str, ...] = ("single_stage", "pipeline", "layer_passes", "expert_passes", "z3_calls",
                                  "tp_calls")
#: the host-gap features paid once per iteration (the others are spread over the micro-batches)
HOST_ONCE: tuple[str, ...] = ("single_stage", "pipeline")
#: host launch time of an iteration (the host-bound regime: the GPU waits for the host, so the iteration lasts as long
#: as the host takes to issue it): per iteration, per layer pass, per local expert pass (a MoE layer issues each
#: local expert's gather, GEMMs and scatter: without it a host-bound MoE cell's host time, 4x H200 TP2xEP2 at 62% GPU
#: busy, landed on the dense coefficients and moved the held-out 4x H100 TP4 symm_mem cell from +41% to +65%; an
#: older calibration without it reads 0), per ZeRO-3 gather/reduce-scatter call (DeepSpeed's
#: per-module hooks), per tensor-parallel collective, per tensor-parallel collective fused into its GEMM by an overlap
#: mechanism (ring or symm_mem: workspace lookups, two streams, barriers and copies are host work; symm_mem on small
#: shards doubles the GPU's idle time), and the extra of symm_mem over the ring (pooled: one mechanism's cells inform
#: the other's, and the extra stays 0 where only one was measured)
LAUNCH_FEATURES: tuple[str, ...] = ("iteration", "layer_passes", "expert_passes", "z3_calls", "tp_calls",
                                    "tp_fused_calls", "tp_symm_mem_calls")
#: the host's time per iteration for a stage's ZeRO-3 calls (``H``), of which the GPU idles ``H^2 / (H + G)`` next to
#: ``G`` seconds of GPU work (:func:`calorimeter.projection.schedule.tandem_idle_s`): per ZeRO-3 gather/reduce-scatter
#: call only. DeepSpeed's module hooks wait for their collectives, and the host runs at most about two calls ahead,
#: so the GPU idles more than where the host runs freely ahead (``max(H, G)``) and less than where they take turns
#: (``H + G``); the idle per call falls as the GPU work per call grows (2x H200 ZeRO-3 dp2: 1.2-2.5 ms at 2.3-3.3 ms
#: of GPU work per call, 0.2-0.7 ms at 8-14 ms). Tensor-parallel collectives are enqueued without waiting, so the
#: host runs ahead and a host-bound TP stage lasts as long as the host's launch time (a floor, not an addition):
#: TP2+SP with overlap takes 1.30-1.36 s per iteration at sequence 1024 and 2048 on one machine, 1.33-1.36 s at 4096
#: on another, while its busy time goes 0.46 -> 0.95 s (docs/projection.md, "The host-bound regime"); fitted as an
#: addition there, the held-out 1024 cell came out 40% fast
Z3_HOST_FEATURES: tuple[str, ...] = ("z3_calls",)
#: the tensor-parallel overlap mechanisms the host-gap and schedule models know
TP_OVERLAP_MECHANISMS: tuple[str, ...] = ("ring", "symm_mem")


@dataclass(frozen=True)
class ComputeRates:
    """Seconds per unit of work, per category and feature (absent: 0), and how well they fit.

    Attributes:
        coef: category -> feature -> seconds per unit.
        fit_rel_error: category -> median absolute relative error of the fit on its calibration rows.
        n_rows: calibration rows (traced ranks) used.
    """

    coef: dict[str, dict[str, float]]
    fit_rel_error: dict[str, float]
    n_rows: int
    host: dict[str, float] = field(default_factory=dict)
    launch: dict[str, float] = field(default_factory=dict)
    z3_host: dict[str, float] = field(default_factory=dict)
    host_factor: dict[str, float] = field(default_factory=dict)

    def machine_factor(self, machine: str | None) -> float:
        """How much longer than an average calibrated host this machine's host takes (1 where never calibrated:
        :mod:`calorimeter.projection.hosts`)."""
        return self.host_factor.get(machine, 1.0)  # None: never a key

    def host_gap_s(self, stage: StageWork, machine: str | None = None) -> tuple[float, float]:
        """(seconds per iteration spread over the micro-batches, seconds once per iteration) of host gaps, on this
        machine's host (:meth:`machine_factor`)."""
        feats = host_features(stage)
        k = self.machine_factor(machine)
        spread = sum(self.host.get(f, 0.0) * feats[f] for f in HOST_FEATURES if f not in HOST_ONCE)
        return k * spread, k * sum(self.host.get(f, 0.0) * feats[f] for f in HOST_ONCE)

    def launch_s(self, stage: StageWork, tp_overlap: str = "none", machine: str | None = None) -> float:
        """Seconds the host needs to issue one iteration of a stage's rank (0 when never calibrated).

        Args:
            tp_overlap: the cell's tensor-parallel overlap mechanism (``none`` without overlap).
            machine: the machine projected for (:meth:`machine_factor`; None: an average calibrated host).
        """
        feats = host_features(stage, tp_overlap)
        return self.machine_factor(machine) * sum(self.launch.get(f, 0.0) * feats.get(f, 0.0)
                                                  for f in LAUNCH_FEATURES)

    def z3_host_s(self, stage: StageWork, tp_overlap: str = "none", machine: str | None = None) -> float:
        """Seconds the host needs per iteration of a stage's rank for its ZeRO-3 calls (:data:`Z3_HOST_FEATURES`;
        0 without ZeRO-3 calls or when never calibrated): the GPU idles
        :func:`~calorimeter.projection.schedule.tandem_idle_s` of it and the stage's GPU work.

        Args:
            tp_overlap: the cell's tensor-parallel overlap mechanism (``none`` without overlap).
            machine: the machine projected for (:meth:`machine_factor`; None: an average calibrated host).
        """
        feats = host_features(stage, tp_overlap)
        return self.machine_factor(machine) * sum(self.z3_host.get(f, 0.0) * feats.get(f, 0.0)
                                                  for f in Z3_HOST_FEATURES)

    def seconds(self, stage: StageWork) -> dict[str, float]:
        """Predicted summed kernel seconds per compute category for one rank of a stage, one iteration."""
        return {cat: sum(c * stage.features.get(f, 0.0) for f, c in self.coef[cat].items())
                for cat in COMPUTE_CATEGORIES}

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"coef": self.coef, "fit_rel_error": self.fit_rel_error, "n_rows": self.n_rows, "host": self.host,
                "launch": self.launch, "z3_host": self.z3_host, "host_factor": self.host_factor}

    @classmethod
    def from_dict(cls, d: dict) -> ComputeRates:
        """Inverse of :meth:`to_dict` (a calibration written before the host time of ZeRO-3 calls has none: its
        ``idle`` was the GPU's idle per call of the earlier model, not a host time)."""
        return cls({k: dict(v) for k, v in d["coef"].items()}, dict(d["fit_rel_error"]), int(d["n_rows"]),
                   dict(d.get("host", {})), dict(d.get("launch", {})), dict(d.get("z3_host", {})),
                   dict(d.get("host_factor", {})))


def host_features(stage: StageWork, tp_overlap: str = "none") -> dict[str, float]:
    """The host-gap work counts of one rank of a stage: once per iteration (``single_stage`` without pipeline,
    ``pipeline`` with: DeepSpeed's pipeline engine steps differently), layer and expert passes from the workload,
    collective calls from its messages (ZeRO-3 module hooks; tensor-parallel collectives, split by the overlap
    mechanism that fuses them into the GEMMs)."""
    z3 = sum(op.calls for op in stage.comm if op.role == "zero3")
    tp = sum(op.calls for op in stage.comm if op.role == "tp")
    pipeline = any(op.role == "pp" for op in stage.comm)
    return {"iteration": 1.0, "single_stage": 0.0 if pipeline else 1.0, "pipeline": 1.0 if pipeline else 0.0,
            "layer_passes": stage.features.get("layer_passes", 0.0),
            "expert_passes": stage.features.get("expert_passes", 0.0), "z3_calls": z3, "tp_calls": tp,
            "tp_fused_calls": tp if tp_overlap in TP_OVERLAP_MECHANISMS else 0.0,
            "tp_symm_mem_calls": tp if tp_overlap == "symm_mem" else 0.0}


def _nnls_rel(x: np.ndarray, y: np.ndarray, w: np.ndarray, unbiased: bool = False) -> np.ndarray:
    """Non-negative least squares of ``x b = y`` with row weights ``w``, columns scaled for conditioning.

    With ``w = 1 / y`` this minimises the squared relative errors, and that estimator is biased low: for one
    coefficient it gives ``mean(pred / y) = mean(r)^2 / mean(r^2) <= 1`` (``r`` the per-row ratio), short by about the
    squared dispersion of the rows (10-20% scatter: 1-4% low, the under-prediction the earlier model showed on every
    cell). ``unbiased`` rescales the solution so that the weighted mean of ``pred / y`` over the rows is 1: the
    relative errors then average zero (every coefficient scaled alike; the fit's shape is unchanged).
    """
    from scipy.optimize import nnls  # fitting only: projecting never imports scipy

    xs, ys = x * w[:, None], y * w
    scale = np.where(np.abs(xs).max(axis=0) > 0, np.abs(xs).max(axis=0), 1.0)
    beta, _ = nnls(xs / scale, ys)
    beta = beta / scale
    if unbiased:
        pred = x @ beta
        ok = (y > 0) & (pred > 0)
        if ok.any():
            ww = (w * y)[ok]  # the per-cell weights (w = per-cell weight / y)
            beta = beta / (np.sum(ww * pred[ok] / y[ok]) / np.sum(ww))
    return beta


def fit_host_gaps(rows: list[tuple[str, StageWork, float]]) -> dict[str, float]:
    """Seconds of host gap per iteration (with and without pipeline), layer pass, local-expert pass, ZeRO-3 and TP
    collective call of GPU-bound cells.

    Args:
        rows: per GPU-bound calibration cell (cell id, the busiest traced rank's stage work, measured iteration time
            minus that rank's kernel-busy time). In pipeline cells the NCCL kernels spin while waiting for the other
            stage, so the busiest rank's busy time holds the pipeline bubble and what is left is host gap.
    """
    if not rows:
        return dict.fromkeys(HOST_FEATURES, 0.0)
    x = np.array([[host_features(st)[f] for f in HOST_FEATURES] for _, st, _ in rows])
    y = np.array([max(gap, 0.0) for _, _, gap in rows])
    beta = _nnls_rel(x, y, np.ones(len(rows)))
    return {f: float(b) for f, b in zip(HOST_FEATURES, beta, strict=True)}


def fit_launch(rows: list[tuple[str, StageWork, float, str]]) -> dict[str, float]:
    """Host launch seconds per unit of :data:`LAUNCH_FEATURES`, fitted (relative errors, mean-unbiased) on the
    host-bound cells without pipeline, whose iteration lasts as long as the host takes to issue it.

    Args:
        rows: (cell id, its stage work, measured iteration time, its TP overlap mechanism).
    """
    if not rows:
        return dict.fromkeys(LAUNCH_FEATURES, 0.0)
    feats = [host_features(st, ov) for _, st, _, ov in rows]
    x = np.array([[f[h] for h in LAUNCH_FEATURES] for f in feats])
    y = np.array([t for _, _, t, _ in rows])
    per_cell = Counter(cid for cid, _, _, _ in rows)
    w = np.array([1.0 / per_cell[cid] for cid, _, _, _ in rows]) / y
    beta = _nnls_rel(x, y, w, unbiased=True)
    return {f: float(b) for f, b in zip(LAUNCH_FEATURES, beta, strict=True)}


def fit_z3_host(rows: list[tuple[str, StageWork, float, str]], busy_s: list[float],
                factors: list[float] | None = None) -> dict[str, float]:
    """Host seconds per unit of :data:`Z3_HOST_FEATURES`, fitted on ZeRO-3 cells without pipeline
    (:func:`fit_host_times`: host-bound and GPU-bound): the host time ``H`` whose modelled idle
    :func:`~calorimeter.projection.schedule.tandem_idle_s` ``(H, busy)`` comes closest to the measured iteration
    minus busy time (least squares, errors relative to the iteration); the rows without ZeRO-3 calls are left out
    (their host runs ahead: :func:`fit_launch` gives their floor).

    Args:
        rows: (cell id, stage work, measured iteration time, TP overlap mechanism), as :func:`fit_launch`'s.
        busy_s: per row, the busiest traced rank's kernel-busy seconds.
        factors: per row, its machine's factor on the host time (None: 1 each).
    """
    from scipy.optimize import minimize_scalar  # fitting only: projecting never imports scipy

    k = factors if factors is not None else [1.0] * len(rows)
    keep = [i for i, r in enumerate(rows) if host_features(r[1])["z3_calls"] > 0]
    if not keep:
        return dict.fromkeys(Z3_HOST_FEATURES, 0.0)
    per_cell = Counter(rows[i][0] for i in keep)
    units = np.array([k[i] * sum(host_features(rows[i][1], rows[i][3])[f] for f in Z3_HOST_FEATURES) for i in keep])
    busy = np.array([busy_s[i] for i in keep])
    idle = np.array([max(rows[i][2] - busy_s[i], 0.0) for i in keep])
    w = np.array([1.0 / per_cell[rows[i][0]] / rows[i][2] for i in keep])
    exact = np.array([tandem_host_s(y, b) for y, b in zip(idle, busy, strict=True)]) / units
    lo, hi = float(exact.min()), float(exact.max())  # every residual changes sign between them

    def loss(h: float) -> float:
        model = np.array([tandem_idle_s(h * u, b) for u, b in zip(units, busy, strict=True)])
        return float(np.sum((w * (model - idle)) ** 2))

    h = lo if hi <= lo else float(minimize_scalar(loss, bounds=(lo, hi), method="bounded",
                                                  options={"xatol": 1e-9 * hi}).x)
    return dict.fromkeys(Z3_HOST_FEATURES, h)


def fit_compute(rows: list[tuple[str, StageWork, dict[str, float]]],
                host_rows: list[tuple[str, StageWork, float]] | None = None,
                launch_rows: list[tuple[str, StageWork, float, str]] | None = None,
                launch_busy_s: list[float] | None = None, launch_machines: list[str | None] | None = None,
                host_machines: list[str | None] | None = None,
                launch_configs: list[str] | None = None,
                z3_rows: list[tuple[str, StageWork, float, str, float, str | None]] | None = None) -> ComputeRates:
    """Fit the per-category rates.

    Args:
        rows: (cell id, the traced rank's stage work, measured ``{category: summed kernel seconds}``) per traced rank
            of every calibration cell.
        host_rows: rows for :func:`fit_host_gaps`.
        launch_rows: rows for :func:`fit_launch`.
        launch_busy_s: per launch row, the busiest traced rank's kernel-busy seconds (:func:`fit_z3_host`; none:
            no ZeRO-3 host time fitted).
        launch_machines: per launch row, its machine (:func:`calorimeter.records.machines.machine_keys`; none: no
            machine factors, every host taken as alike).
        host_machines: per host-gap row, its machine: its gap is divided by that machine's factor (the factors come
            from the host-bound rows; a host gap is host time too).
        launch_configs: per launch row, its configuration (:attr:`calorimeter.plan.cell.Cell.config_id`): the unit
            of a machine factor's evidence (:func:`calorimeter.projection.hosts.fit_factors`; none: each row).
        z3_rows: the GPU-bound ZeRO-3 cells without pipeline (:func:`fit_host_times`).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no traced rank to calibrate compute on")
    per_cell = Counter(cid for cid, _, _ in rows)  # rows per cell, for the weights
    coef: dict[str, dict[str, float]] = {}
    err: dict[str, float] = {}
    for cat, feats in CATEGORY_FEATURES.items():
        x = np.array([[st.features.get(f, 0.0) for f in feats] for _, st, _ in rows], dtype=float)
        y = np.array([meas.get(cat, 0.0) for _, _, meas in rows], dtype=float)
        ok = y > 0
        if not ok.any():
            coef[cat] = dict.fromkeys(feats, 0.0)
            err[cat] = float("nan")
            continue
        w = np.array([1.0 / per_cell[cid] for cid, _, _ in rows])[ok] / y[ok]
        beta = _nnls_rel(x[ok], y[ok], w, unbiased=True)
        coef[cat] = {f: float(b) for f, b in zip(feats, beta, strict=True)}
        pred = x[ok] @ beta
        err[cat] = float(np.median(np.abs(pred / y[ok] - 1.0)))
    launch, z3_host, factors = fit_host_times(launch_rows or [], launch_busy_s, launch_machines, launch_configs,
                                              z3_rows)
    gaps = host_rows or []
    if factors and host_machines:
        gaps = [(c, st, g / factors.get(m, 1.0) if m is not None else g)
                for (c, st, g), m in zip(gaps, host_machines, strict=True)]
    return ComputeRates(coef, err, len(rows), fit_host_gaps(gaps), launch, z3_host, factors)


def fit_host_times(rows: list[tuple[str, StageWork, float, str]], busy_s: list[float] | None,
                   machines: list[str | None] | None, configs: list[str] | None = None,
                   z3_rows: list[tuple[str, StageWork, float, str, float, str | None]] | None = None,
                   ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Launch and ZeRO-3 host-time coefficients of an average host and each machine's factor on them, alternately
    fitted (:data:`calorimeter.projection.hosts.ROUNDS` rounds): the coefficients with the host times scaled by their
    machine's factor (launch: the iteration divided by it; ZeRO-3: the host time multiplied by it in the modelled
    idle), then each machine's factor from its rows' measured over modelled host time (ZeRO-3 rows: the host time
    their measured idle and busy time imply, :func:`~calorimeter.projection.schedule.tandem_host_s`; others: the
    iteration against the launch floor); the coefficients returned are fitted with the factors returned.

    The ZeRO-3 host time is fitted on the GPU-bound ZeRO-3 rows too (``z3_rows``; the factors stay the host-bound
    rows'): the model gives the idle of every ZeRO-3 stage, and a host-bound run is one whose host happened to be
    slow (one configuration on one machine: 1.68, 1.69 s GPU-bound and 1.99 s host-bound), so the host-bound rows
    alone put the host time of a call about 1.5x above the GPU-bound rows' (2x H200 medians: 3.3 and 2.2 ms).

    Args:
        rows: the rows of :func:`fit_launch`.
        busy_s: per row, the busiest traced rank's kernel-busy seconds (None: no ZeRO-3 host time fitted, no
            factors).
        machines: per row, its machine (None: no factors).
        configs: per row, its configuration (:func:`calorimeter.projection.hosts.fit_factors`).
        z3_rows: (cell id, stage work, measured iteration time, TP overlap mechanism, the busiest traced rank's
            kernel-busy seconds, machine) of the GPU-bound ZeRO-3 cells without pipeline (None: none).
    """
    if busy_s is None:
        return fit_launch(rows), {}, {}
    factors: dict[str, float] = {}
    rounds = ROUNDS + 1 if machines else 1
    extra = z3_rows or []
    z3_fit_rows, z3_fit_busy = [*rows, *(r[:4] for r in extra)], [*busy_s, *(r[4] for r in extra)]
    for i in range(rounds):
        f = [factors.get(m, 1.0) if m is not None else 1.0 for m in (machines or [None] * len(rows))]
        launch = fit_launch([(c, st, t / k, ov) for (c, st, t, ov), k in zip(rows, f, strict=True)])
        z3_host = fit_z3_host(z3_fit_rows, z3_fit_busy,
                              [*f, *(factors.get(r[5], 1.0) if r[5] is not None else 1.0 for r in extra)])
        if i == rounds - 1:
            break
        rates = ComputeRates({}, {}, 0, launch=launch, z3_host=z3_host)
        logr = []
        for (_, st, t, ov), b in zip(rows, busy_s, strict=True):
            z3 = host_features(st, ov)["z3_calls"] > 0
            model = rates.z3_host_s(st, ov) if z3 else rates.launch_s(st, ov)
            meas = tandem_host_s(t - b, b) if z3 else t
            logr.append(math.log(meas / model) if model > 0 and meas > 0 else math.nan)
        factors = fit_factors(logr, machines, configs=configs)
    return launch, z3_host, factors


__all__ = ["CATEGORY_FEATURES", "COMPUTE_CATEGORIES", "FEATURES", "HOST_FEATURES", "TP_OVERLAP_MECHANISMS",
           "LAUNCH_FEATURES", "Z3_HOST_FEATURES", "ComputeRates", "fit_compute", "fit_host_gaps", "fit_host_times",
           "fit_launch", "fit_z3_host", "host_features"]
