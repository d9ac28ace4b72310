"""Fig. 17, per-GPU thermal imbalance: time-weighted average and peak temperature of each GPU's die and of its HBM
(the study's GPU and memory temperature heatmaps) per GPU and configuration, with a per-GPU average row and node
boundaries."""

from __future__ import annotations

from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig17_temperature"
TABLES = ("runs", "gpus")
PANELS = [("temp_avg_c", "Avg. GPU temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("temp_peak_c", "Peak GPU temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("hbm_temp_avg_c", "Avg. HBM temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("hbm_temp_peak_c", "Peak HBM temperature (°C)", "YlOrRd", "celsius", 1.0)]
draw = heatmap_figure(NAME, PANELS, "Fig. 17: per-GPU GPU and HBM temperature", avg_row=True, ncols=2)

__all__ = ["NAME", "TABLES", "draw", "select"]
