"""Fig. 5, per-GPU NVLink and PCIe receive volume over the measured phase (GB, log colour scale): rows are the
configurations (baseline cells), columns the GPUs, node boundaries marked."""

from __future__ import annotations

from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig05_links"
TABLES = ("runs", "gpus")
PANELS = [("nvlink_rx_bytes", "NVLink Rx total (GB)", "Greens", "log", 1e-9),
          ("pcie_rx_bytes", "PCIe Rx total (GB)", "Blues", "log", 1e-9)]
draw = heatmap_figure(NAME, PANELS, "Fig. 5: per-GPU receive volume")

__all__ = ["NAME", "TABLES", "draw", "select"]
