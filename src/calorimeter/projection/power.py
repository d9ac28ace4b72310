"""Average GPU power from activity, under the power cap, calibrated per GPU type on the measured cells.

Each GPU's average power over the measured steps is modelled in two regimes, each linear in its activity shares,

    P_full    = P_0 + a * u_gemm + b * u_other + c * u_comm      (the GPU at its full clock)
    P_managed = P_0' + a' * u_gemm + b' * u_other + c' * u_comm  (power management lowering the clock)
    P = min(P_full, P_managed, power limit),

where ``u_gemm``, ``u_other`` and ``u_comm`` are the shares of the iteration the GPU spends in GEMM/attention
kernels, in the other compute kernels (elementwise, norms, rest) and in communication kernels (summed kernel time
over the iteration time, so overlapped communication adds to the GEMM share). Why two: on the H200s the average SM
clock is the full 1980 MHz up to ~50% busy and falls to ~1730 MHz at 100% (power management), and power rises
steeply from ~160-230 W at 10-30% busy to ~450 W at 50%, then flattens (~590-625 W from 80%): one line through all of
them put its constant at ~250 W and predicted the 25-35%-busy GPUs 20-35% high. The full-clock line is fitted on the
GPUs whose average SM clock is within :data:`FULL_CLOCK_SHARE` of the calibration's highest, the managed one on the
others (censored at the power limit); where either group is smaller than :data:`MIN_GPUS`, or the full-clock GPUs'
activity (the sum of the three shares) spans less than :data:`MIN_FULL_CLOCK_SPAN` (their slope is not determined by
them), one line on every GPU, as before (the H100 sets: the 1-GPU cells all below their full clock, the 2-GPU
host-bound cells at full clock but all at 47-65% busy: a full-clock line through them predicted the 1-GPU cells
15-35% low), and one line wherever it fits the calibration GPUs better than the two (median relative error): GPUs
near the full clock that the power cap holds (4x H100 Mixtral, 1920 MHz at 617-658 W) otherwise left a managed line
with no slope. Coefficients by non-negative least squares on every GPU of
every calibration cell, with the measured kernel shares of the GPU's pipeline stage (the traced rank of that stage)
and the measured average power (``gpus.parquet``). Energy per iteration is then the sum over the cell's GPUs of power
x iteration time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

POWER_FEATURES: tuple[str, ...] = ("const", "u_gemm", "u_other", "u_comm")
#: a GPU averaging at least this share of its power limit is taken as capped
CAPPED_SHARE = 0.97
#: a GPU whose average SM clock is at least this share of the calibration's highest ran at its full clock
FULL_CLOCK_SHARE = 0.97
#: the fewest GPUs a regime's line is fitted on (fewer: one line for both)
MIN_GPUS = 8
#: the narrowest range of activity (sum of the shares) the full-clock GPUs must span for their own line
MIN_FULL_CLOCK_SPAN = 0.2


@dataclass(frozen=True)
class PowerModel:
    """Fitted power model of one GPU type.

    Attributes:
        coef: feature -> watts (``const`` = P_0) of the managed regime (or of the one line).
        cap_w: the power limit the calibration ran under (the model never exceeds it).
        fit_rel_error: median absolute relative error on the calibration GPUs.
        n_gpus: calibration GPUs.
        coef_full_clock: feature -> watts of the full-clock regime; empty where it was not fitted (one line).
    """

    coef: dict[str, float]
    cap_w: float
    fit_rel_error: float
    n_gpus: int
    coef_full_clock: dict[str, float] = field(default_factory=dict)

    def power_w(self, u_gemm: float, u_other: float, u_comm: float) -> float:
        """Average power of one GPU with these activity shares."""
        u = {"const": 1.0, "u_gemm": u_gemm, "u_other": u_other, "u_comm": u_comm}
        p = sum(self.coef[k] * u[k] for k in POWER_FEATURES)
        if self.coef_full_clock:
            p = min(p, sum(self.coef_full_clock[k] * u[k] for k in POWER_FEATURES))
        return min(p, self.cap_w) if self.cap_w == self.cap_w else p

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"coef": self.coef, "cap_w": self.cap_w, "fit_rel_error": self.fit_rel_error, "n_gpus": self.n_gpus,
                "coef_full_clock": self.coef_full_clock}

    @classmethod
    def from_dict(cls, d: dict) -> PowerModel:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(d["coef"]), float(d["cap_w"]), float(d["fit_rel_error"]), int(d["n_gpus"]),
                   dict(d.get("coef_full_clock", {})))


def _fit_line(x: np.ndarray, y: np.ndarray, w: np.ndarray, cap_w: float) -> np.ndarray:
    """Non-negative least squares of one line; GPUs at the cap only say "the activity asks for at least the cap":
    fit on the others, then drop the capped ones the line already puts at or above the cap, and refit (censored
    regression, a few rounds)."""
    from scipy.optimize import nnls  # fitting only: projecting never imports scipy

    capped = y >= CAPPED_SHARE * cap_w if cap_w == cap_w else np.zeros(len(y), bool)
    use = np.ones(len(y), bool)
    for _ in range(5):
        beta, _ = nnls(x[use] * w[use, None], y[use] * w[use])
        new_use = ~(capped & (x @ beta >= cap_w))
        if not new_use.any() or (new_use == use).all():
            break
        use = new_use
    return beta


def fit_power(rows: list[tuple[str, dict[str, float], float]], cap_w: float,
              clock_mhz: list[float] | None = None) -> PowerModel:
    """Fit the power model.

    Args:
        rows: per GPU (cell id, activity shares ``{u_gemm, u_other, u_comm}``, measured average power W).
        cap_w: the GPUs' power limit.
        clock_mhz: per row, the GPU's average SM clock over the measured steps (None, or NaN rows: one line).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no GPU with measured power to calibrate the power model on")
    per_cell = Counter(cid for cid, _, _ in rows)  # rows per cell, for the weights
    x = np.array([[1.0, u["u_gemm"], u["u_other"], u["u_comm"]] for _, u, _ in rows])
    y = np.array([p for _, _, p in rows])
    w = np.array([1.0 / np.sqrt(per_cell[cid]) for cid, _, _ in rows])
    clk = np.array(clock_mhz if clock_mhz is not None else [np.nan] * len(rows), dtype=float)
    full = np.isfinite(clk) & (clk >= FULL_CLOCK_SHARE * np.nanmax(clk)) if np.isfinite(clk).any() else (
        np.zeros(len(rows), bool))
    managed = np.isfinite(clk) & ~full
    full_coef: dict[str, float] = {}
    activity = x[:, 1:].sum(axis=1)
    span = float(np.ptp(activity[full])) if full.any() else 0.0
    one = PowerModel({k: float(b) for k, b in zip(POWER_FEATURES, _fit_line(x, y, w, cap_w), strict=True)}, cap_w,
                     float("nan"), len(rows))
    candidates = [one]
    if full.sum() >= MIN_GPUS and managed.sum() >= MIN_GPUS and span >= MIN_FULL_CLOCK_SPAN:
        full_coef = {k: float(b) for k, b in zip(POWER_FEATURES, _fit_line(x[full], y[full], w[full], cap_w),
                                                 strict=True)}
        managed_coef = {k: float(b) for k, b in zip(POWER_FEATURES, _fit_line(x[managed], y[managed], w[managed],
                                                                               cap_w), strict=True)}
        candidates.insert(0, PowerModel(managed_coef, cap_w, float("nan"), len(rows), full_coef))

    def fit_error(model: PowerModel) -> float:
        pred = np.array([model.power_w(u["u_gemm"], u["u_other"], u["u_comm"]) for _, u, _ in rows])
        return float(np.median(np.abs(pred / y - 1.0)))

    # two lines only where they fit the calibration GPUs better than one (GPUs near the full clock that the power
    # cap holds, e.g. 4x H100 Mixtral at 1920 MHz and 617-658 W, would otherwise make a managed line of no slope)
    errors = [fit_error(m) for m in candidates]
    best = candidates[int(np.argmin(errors))]
    return PowerModel(best.coef, cap_w, min(errors), len(rows), best.coef_full_clock)
