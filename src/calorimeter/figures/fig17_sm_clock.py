"""Fig. 17 (clock), the SM-clock counterpart of the per-GPU temperature heatmaps: average and minimum SM clock per
GPU and configuration, with a per-GPU average row and node boundaries."""

from __future__ import annotations

import matplotlib.pyplot as plt

from calorimeter.figures.common import FigureResult, Tables
from calorimeter.figures.heatmaps import draw_heatmaps, select

NAME = "fig17_sm_clock"
TABLES = ("runs", "gpus")
PANELS = [("sm_clock_avg_mhz", "Avg. SM clock (MHz)", "viridis", "linear", 1.0),
          ("sm_clock_min_mhz", "Min. SM clock (MHz)", "viridis", "linear", 1.0)]

__all__ = ["NAME", "TABLES", "draw", "select"]


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """SM-clock heatmaps (left open) and what they drew."""
    return draw_heatmaps(tables["runs"], tables["gpus"], PANELS, NAME, "Fig. 17 (clock): per-GPU SM clock",
                         avg_row=True)
