"""Fig. 17, per-GPU thermal imbalance: time-weighted average and peak GPU temperature per GPU and configuration,
with a per-GPU average row and node boundaries."""

from __future__ import annotations

import matplotlib.pyplot as plt

from calorimeter.figures.common import FigureResult, Tables
from calorimeter.figures.heatmaps import draw_heatmaps, select

NAME = "fig17_temperature"
TABLES = ("runs", "gpus")
PANELS = [("temp_avg_c", "Avg. temperature (°C)", "YlOrRd", "linear", 1.0),
          ("temp_peak_c", "Peak temperature (°C)", "YlOrRd", "linear", 1.0)]

__all__ = ["NAME", "TABLES", "draw", "select"]


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """Temperature heatmaps (left open) and what they drew."""
    return draw_heatmaps(tables["runs"], tables["gpus"], PANELS, NAME, "Fig. 17: per-GPU temperature", avg_row=True)
