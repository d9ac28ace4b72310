"""What a validation measures and against what: the metrics compared, the kinds of fold (designs) a validation table's
rows come from, the stated coverage and the targets; and how a validation table's rows are read (design, regimes,
measured host-bound). The lowest of the validation's modules: the designs (:mod:`~calorimeter.projection.validation`),
the bands (:mod:`~calorimeter.projection.bands`), the summaries (:mod:`~calorimeter.projection.accuracy`) and the
report (:mod:`~calorimeter.projection.report`) read it.
"""

from __future__ import annotations

import pandas as pd

from calorimeter.projection.regimes import GPU_BOUND, HOST_BOUND
from calorimeter.projection.schedule import HOST_BOUND_BUSY_FRAC

#: metrics compared, measured column = predicted column
METRICS: tuple[str, ...] = ("iteration_time_s", "energy_per_token_j", "power_avg_w", "tokens_per_s_per_gpu", "mfu_full")
#: the targets: median absolute error per metric, largest absolute error, mean signed error, on the
#: held-out current-engine cells
TARGET_MEDIAN = {"tokens_per_s_per_gpu": 0.05, "energy_per_token_j": 0.05, "power_avg_w": 0.03}
TARGET_MAX = 0.15
TARGET_MEAN_SIGNED = 0.02
#: the stated coverage of every band: this share of held-out cells lies within it
COVERAGE = 0.9
#: the kinds of fold a validation table's rows come from: ``loco`` (one configuration held out), ``fold`` (the
#: configured folds of sweep folders), ``scale`` (every cell at one value of a range key predicted from the cells
#: below it: :data:`calorimeter.projection.validation.SCALE_KEYS`), ``moe-from-dense`` (an engine's MoE cells from its
#: dense ones), ``cross`` (another engine's or GPU type's calibration predicting the current cells), ``cross-moe`` (the
#: current calibration predicting another engine's MoE cells)
DESIGNS: tuple[str, ...] = ("loco", "fold", "scale", "moe-from-dense", "cross", "cross-moe")
#: the designs whose rows make and check the regimes' bands (the held-out configurations of an engine and its
#: extrapolation folds); ``HELD_OUT`` make the base regimes' bands and the targets
BANDING: tuple[str, ...] = ("loco", "fold", "scale", "moe-from-dense")
HELD_OUT: tuple[str, ...] = ("loco", "fold")


def design_of(t: pd.DataFrame) -> pd.Series:
    """Each row's design (:data:`DESIGNS`; a table without the column: held-out configurations)."""
    return t["design"] if "design" in t else pd.Series("loco", index=t.index)


def row_regimes(t: pd.DataFrame) -> pd.Series:
    """Each row's regimes (a list, the base first; a table without a ``regime`` column: dense host-bound where the
    projection called it host-bound, else dense GPU-bound)."""
    if "regime" in t:
        return t["regime"].fillna(GPU_BOUND).astype(str).str.split("; ")
    hb = t["predicted_host_bound"].fillna(False).astype(bool) if "predicted_host_bound" in t else pd.Series(
        False, index=t.index)
    return hb.map(lambda h: [HOST_BOUND if h else GPU_BOUND])


def host_bound_rows(t: pd.DataFrame) -> pd.Series:
    """The rows whose measured run was host-bound: its GPU kernels busy under :data:`HOST_BOUND_BUSY_FRAC` of the
    iteration (``busy_frac``; the row's ``notes`` start with ``host-bound`` for the reader)."""
    return t["busy_frac"] < HOST_BOUND_BUSY_FRAC


__all__ = ["BANDING", "COVERAGE", "DESIGNS", "HELD_OUT", "METRICS", "TARGET_MAX", "TARGET_MEAN_SIGNED",
           "TARGET_MEDIAN", "design_of", "host_bound_rows", "row_regimes"]
