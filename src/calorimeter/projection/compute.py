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

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from calorimeter.plan.work import FEATURES, StageWork

#: the compute kernel categories (telemetry/kernels.py) and the work counts each depends on
CATEGORY_FEATURES: dict[str, tuple[str, ...]] = {
    "gemm_attention": ("dense_flops", "attention_flops", "z3_flops"),
    "memory_elementwise": ("act_elems", "head_elems", "z3_elems", "optim_elems", "moe_elems"),
    "normalization": ("act_elems",),
    "other": ("act_elems", "moe_elems"),
}
COMPUTE_CATEGORIES: tuple[str, ...] = tuple(CATEGORY_FEATURES)
#: host gaps (the GPU idle between kernels while the host launches them): per iteration, per layer pass, per local
#: expert pass
HOST_FEATURES: tuple[str, ...] = ("iteration", "layer_passes", "expert_passes")


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

    def host_gap_s(self, stage: StageWork) -> tuple[float, float]:
        """(seconds per iteration spread over the micro-batches, seconds once per iteration) of host gaps."""
        spread = sum(self.host.get(f, 0.0) * stage.features.get(f, 0.0) for f in HOST_FEATURES[1:])
        return spread, self.host.get("iteration", 0.0)

    def seconds(self, stage: StageWork) -> dict[str, float]:
        """Predicted summed kernel seconds per compute category for one rank of a stage, one iteration."""
        return {cat: sum(c * stage.features.get(f, 0.0) for f, c in self.coef[cat].items())
                for cat in COMPUTE_CATEGORIES}

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"coef": self.coef, "fit_rel_error": self.fit_rel_error, "n_rows": self.n_rows, "host": self.host}

    @classmethod
    def from_dict(cls, d: dict) -> ComputeRates:
        """Inverse of :meth:`to_dict`."""
        return cls({k: dict(v) for k, v in d["coef"].items()}, dict(d["fit_rel_error"]), int(d["n_rows"]),
                   dict(d.get("host", {})))


def _nnls_rel(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``x b = y`` with row weights ``w``, columns scaled for conditioning."""
    from scipy.optimize import nnls  # fitting only: projecting never imports scipy

    xs, ys = x * w[:, None], y * w
    scale = np.where(np.abs(xs).max(axis=0) > 0, np.abs(xs).max(axis=0), 1.0)
    beta, _ = nnls(xs / scale, ys)
    return beta / scale


def fit_host_gaps(rows: list[tuple[str, StageWork, float]]) -> dict[str, float]:
    """Seconds of host gap per iteration, per layer pass and per local-expert pass.

    Args:
        rows: per calibration cell without pipeline (cell id, its stage work, measured iteration time minus the
            busiest traced rank's kernel-busy time). Pipeline cells are left out: their ranks' NCCL kernels spin
            while waiting for other stages, so their busy time is not GPU work.
    """
    if not rows:
        return dict.fromkeys(HOST_FEATURES, 0.0)
    x = np.array([[1.0] + [st.features.get(f, 0.0) for f in HOST_FEATURES[1:]] for _, st, _ in rows])
    y = np.array([max(gap, 0.0) for _, _, gap in rows])
    beta = _nnls_rel(x, y, np.ones(len(rows)))
    return {f: float(b) for f, b in zip(HOST_FEATURES, beta, strict=True)}


def fit_compute(rows: list[tuple[str, StageWork, dict[str, float]]],
                host_rows: list[tuple[str, StageWork, float]] | None = None) -> ComputeRates:
    """Fit the per-category rates.

    Args:
        rows: (cell id, the traced rank's stage work, measured ``{category: summed kernel seconds}``) per traced rank
            of every calibration cell.
        host_rows: rows for :func:`fit_host_gaps`.

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
        beta = _nnls_rel(x[ok], y[ok], w)
        coef[cat] = {f: float(b) for f, b in zip(feats, beta, strict=True)}
        pred = x[ok] @ beta
        err[cat] = float(np.median(np.abs(pred / y[ok] - 1.0)))
    return ComputeRates(coef, err, len(rows), fit_host_gaps(host_rows or []))


__all__ = ["CATEGORY_FEATURES", "COMPUTE_CATEGORIES", "FEATURES", "HOST_FEATURES", "ComputeRates", "fit_compute",
           "fit_host_gaps"]
