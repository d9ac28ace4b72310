"""Fig. 4, parallelism sweep: GPU temperature, power and SM clock (average and peak) per parallel configuration,
grouped by model, with the efficiency (samples/s per MJ of one iteration) on the second axis."""

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
    smallest,
)
from calorimeter.figures.panels import draw_panels

NAME = "fig04_parallelism"
TABLES = ("runs", "configs", "gpus")  # gpus: the machine of each cell
TITLE = "Fig. 4: parallelism sweep"
needs = needs_gpu_telemetry


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """One cell per parallel configuration: the study's recompute-only variant (``act``) where the sweep has
    it, else ``base``, else the configuration's most common optimization; the smallest micro-batch."""
    df = prefer(runs, "optimization_label", ["act", "cc+act", "base", "cc"])
    return order_configs(smallest(df, "micro_batch"))


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    df = select(collapse_repeats(tables))
    fig, missing, diff = draw_panels(df, None, "efficiency", "Samples/(s·MJ)", TITLE,
                               "parallelism configuration", knobs=())
    return fig, FigureResult(NAME, len(df), drawn_cells(df), missing, diff)
