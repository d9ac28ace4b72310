"""Fig. 17, per-GPU thermal imbalance: time-weighted average and peak temperature of each GPU's die and of its HBM
(the study's GPU and memory temperature heatmaps) per GPU and configuration, with a per-GPU average row and node
boundaries. Where the cells ran on several machines, each row names its machine and the average row is one per
machine (GPU 0 of two machines is not one GPU)."""

from __future__ import annotations

from calorimeter.figures.common import needs_gpu_telemetry
from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig17_temperature"
TABLES = ("runs", "gpus")
PANELS = [("temp_avg_c", "Avg. GPU temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("temp_peak_c", "Peak GPU temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("hbm_temp_avg_c", "Avg. HBM temperature (°C)", "YlOrRd", "celsius", 1.0),
          ("hbm_temp_peak_c", "Peak HBM temperature (°C)", "YlOrRd", "celsius", 1.0)]
TITLE = "Fig. 17: per-GPU GPU and HBM temperature"
draw = heatmap_figure(NAME, PANELS, TITLE, avg_row=True, ncols=2)
needs = needs_gpu_telemetry

__all__ = ["NAME", "TABLES", "TITLE", "draw", "needs", "select"]
