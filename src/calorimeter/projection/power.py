"""Average GPU power from activity, under the power cap, calibrated per GPU type on the measured cells.

Each GPU's average power over the measured steps is modelled as

    P = P_0 + a * u_gemm + b * u_other + c * u_comm,    capped at the GPU's power limit,

where ``u_gemm``, ``u_other`` and ``u_comm`` are the shares of the iteration the GPU spends in GEMM/attention
kernels, in the other compute kernels (elementwise, norms, rest) and in communication kernels (summed kernel time
over the iteration time, so overlapped communication adds to the GEMM share). The coefficients are fitted by
non-negative least squares on every GPU of every calibration cell, with the measured kernel shares of the GPU's
pipeline stage (the traced rank of that stage) and the measured average power (``gpus.parquet``). Energy per
iteration is then the sum over the cell's GPUs of power x iteration time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

POWER_FEATURES: tuple[str, ...] = ("const", "u_gemm", "u_other", "u_comm")
#: a GPU averaging at least this share of its power limit is taken as capped
CAPPED_SHARE = 0.97


@dataclass(frozen=True)
class PowerModel:
    """Fitted power model of one GPU type.

    Attributes:
        coef: feature -> watts (``const`` = P_0).
        cap_w: the power limit the calibration ran under (the model never exceeds it).
        fit_rel_error: median absolute relative error on the calibration GPUs.
        n_gpus: calibration GPUs.
    """

    coef: dict[str, float]
    cap_w: float
    fit_rel_error: float
    n_gpus: int

    def power_w(self, u_gemm: float, u_other: float, u_comm: float) -> float:
        """Average power of one GPU with these activity shares."""
        u = {"const": 1.0, "u_gemm": u_gemm, "u_other": u_other, "u_comm": u_comm}
        p = sum(self.coef[k] * u[k] for k in POWER_FEATURES)
        return min(p, self.cap_w) if self.cap_w == self.cap_w else p

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"coef": self.coef, "cap_w": self.cap_w, "fit_rel_error": self.fit_rel_error, "n_gpus": self.n_gpus}

    @classmethod
    def from_dict(cls, d: dict) -> PowerModel:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(d["coef"]), float(d["cap_w"]), float(d["fit_rel_error"]), int(d["n_gpus"]))


def fit_power(rows: list[tuple[str, dict[str, float], float]], cap_w: float) -> PowerModel:
    """Fit the power model.

    Args:
        rows: per GPU (cell id, activity shares ``{u_gemm, u_other, u_comm}``, measured average power W).
        cap_w: the GPUs' power limit.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no GPU with measured power to calibrate the power model on")
    per_cell = Counter(cid for cid, _, _ in rows)  # rows per cell, for the weights
    x = np.array([[1.0, u["u_gemm"], u["u_other"], u["u_comm"]] for _, u, _ in rows])
    y = np.array([p for _, _, p in rows])
    w = np.array([1.0 / np.sqrt(per_cell[cid]) for cid, _, _ in rows])
    # GPUs at the cap only say "the activity asks for at least the cap": fit on the others, then drop the capped
    # ones the model already puts at or above the cap, and refit (censored regression, a few rounds)
    capped = y >= CAPPED_SHARE * cap_w if cap_w == cap_w else np.zeros(len(y), bool)
    use = np.ones(len(y), bool)
    from scipy.optimize import nnls  # fitting only: projecting never imports scipy

    for _ in range(5):
        beta, _ = nnls(x[use] * w[use, None], y[use] * w[use])
        above = capped & (x @ beta >= cap_w)
        new_use = ~above
        if not new_use.any() or (new_use == use).all():
            break
        use = new_use
    coef = {k: float(b) for k, b in zip(POWER_FEATURES, beta, strict=True)}
    model = PowerModel(coef, cap_w, float("nan"), len(rows))
    pred = np.array([model.power_w(u["u_gemm"], u["u_other"], u["u_comm"]) for _, u, _ in rows])
    return PowerModel(coef, cap_w, float(np.median(np.abs(pred / y - 1.0))), len(rows))
