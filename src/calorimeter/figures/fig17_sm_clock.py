"""Fig. 17 (clock), the SM-clock counterpart of the per-GPU temperature heatmaps: average and minimum SM clock per
GPU and configuration, on one colour scale shared by both panels (at least ``MIN_MHZ_SPAN`` wide: a clock step is not
the whole colour map), with a per-GPU average row per machine and node boundaries."""

from __future__ import annotations

from calorimeter.figures.common import needs_gpu_telemetry
from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig17_sm_clock"
TABLES = ("runs", "gpus")
TITLE = "Fig. 17 (clock): per-GPU SM clock"
PANELS = [("sm_clock_avg_mhz", "Avg. SM clock (MHz)", "viridis", "mhz", 1.0),
          ("sm_clock_min_mhz", "Min. SM clock (MHz)", "viridis", "mhz", 1.0)]
draw = heatmap_figure(NAME, PANELS, TITLE, avg_row=True)
needs = needs_gpu_telemetry

__all__ = ["NAME", "TABLES", "TITLE", "draw", "needs", "select"]
