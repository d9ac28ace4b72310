"""Fig. 8, optimization sweep: per parallel configuration the optimization variants base / cc (overlap) /
act (recomputation) / cc+act, with GPU temperature, power and SM clock (average and peak) and the efficiency
normalized per model on the second axis."""

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
    smallest,
)
from calorimeter.figures.panels import draw_panels

NAME = "fig08_optimization"
TABLES = ("runs", "configs", "gpus")  # gpus: the machine of each cell
TITLE = "Fig. 8: optimization sweep"
needs = needs_gpu_telemetry


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """Every optimization variant of every configuration, at the configuration's smallest micro-batch."""
    return order_configs(smallest(runs, "micro_batch"))


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    df = select(collapse_repeats(tables))
    fig, missing, diff = draw_panels(df, "optimization_label", "efficiency_norm", "Norm. efficiency",
                               TITLE, "optimization configuration",
                               knobs=("overlap", "recompute"))
    return fig, FigureResult(NAME, len(df), drawn_cells(df), missing, diff)
