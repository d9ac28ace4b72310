"""Fig. 17, per-GPU thermal imbalance: time-weighted average and peak GPU temperature per GPU and configuration,
with a per-GPU average row and node boundaries."""

from __future__ import annotations

from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig17_temperature"
TABLES = ("runs", "gpus")
PANELS = [("temp_avg_c", "Avg. temperature (°C)", "YlOrRd", "linear", 1.0),
          ("temp_peak_c", "Peak temperature (°C)", "YlOrRd", "linear", 1.0)]
draw = heatmap_figure(NAME, PANELS, "Fig. 17: per-GPU temperature", avg_row=True)

__all__ = ["NAME", "TABLES", "draw", "select"]
