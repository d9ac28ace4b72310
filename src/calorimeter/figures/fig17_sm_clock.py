"""Fig. 17 (clock), the SM-clock counterpart of the per-GPU temperature heatmaps: average and minimum SM clock per
GPU and configuration, with a per-GPU average row and node boundaries."""

from __future__ import annotations

from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig17_sm_clock"
TABLES = ("runs", "gpus")
PANELS = [("sm_clock_avg_mhz", "Avg. SM clock (MHz)", "viridis", "linear", 1.0),
          ("sm_clock_min_mhz", "Min. SM clock (MHz)", "viridis", "linear", 1.0)]
draw = heatmap_figure(NAME, PANELS, "Fig. 17 (clock): per-GPU SM clock", avg_row=True)

__all__ = ["NAME", "TABLES", "draw", "select"]
