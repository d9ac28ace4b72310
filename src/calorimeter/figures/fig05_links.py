"""Fig. 5, per-GPU NVLink and PCIe receive volume over the measured phase (GB, log colour scale): rows are the
configurations (baseline cells), columns the GPUs, node boundaries marked."""

from __future__ import annotations

import matplotlib.pyplot as plt

from calorimeter.figures.common import FigureResult, Tables
from calorimeter.figures.heatmaps import draw_heatmaps, select

NAME = "fig05_links"
TABLES = ("runs", "gpus")
PANELS = [("nvlink_rx_bytes", "NVLink Rx total (GB)", "Greens", "log", 1e-9),
          ("pcie_rx_bytes", "PCIe Rx total (GB)", "Blues", "log", 1e-9)]

__all__ = ["NAME", "TABLES", "draw", "select"]


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    return draw_heatmaps(tables["runs"], tables["gpus"], PANELS, NAME, "Fig. 5: per-GPU receive volume")
