"""Fig. 13, micro-batch sweep: per parallel configuration each micro-batch size, with GPU temperature, power and
SM clock (average and peak) and the efficiency normalized per model on the second axis."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from calorimeter.figures.common import (
    FigureResult,
    Tables,
    collapse_repeats,
    drawn_cells,
    needs_gpu_telemetry,
    order_configs,
    prefer,
)
from calorimeter.figures.panels import draw_panels

NAME = "fig13_microbatch"
TABLES = ("runs", "configs", "gpus")  # gpus: the machine of each cell
TITLE = "Fig. 13: micro-batch sweep"
needs = needs_gpu_telemetry


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """Every micro-batch of every configuration, at one optimization per configuration (the study's ``act``
    where present, else ``base``, else the most common)."""
    return order_configs(prefer(runs, "optimization_label", ["act", "cc+act", "base", "cc"]))


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    df = select(collapse_repeats(tables))
    fig, missing, diff = draw_panels(df, "micro_batch", "efficiency_norm", "Norm. efficiency",
                               TITLE, "micro-batch size", knobs=("micro_batch",))
    return fig, FigureResult(NAME, len(df), drawn_cells(df), missing, diff)
