"""Fig. 5, per-GPU NVLink and PCIe receive volume over the measured phase (GB, log colour scale): rows are the
configurations (baseline cells), columns the GPUs, node boundaries marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from calorimeter.figures.common import FigureResult, save
from calorimeter.figures.heatmaps import draw_heatmaps

NAME = "fig05_links"
PANELS = [("nvlink_rx_bytes", "NVLink Rx total (GB)", "Greens", "log", 1e-9),
          ("pcie_rx_bytes", "PCIe Rx total (GB)", "Blues", "log", 1e-9)]


def draw(runs: pd.DataFrame, gpus: pd.DataFrame) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    return draw_heatmaps(runs, gpus, PANELS, NAME, "Fig. 5: per-GPU receive volume")


def plot(runs: pd.DataFrame, gpus: pd.DataFrame, out_png: Path, out_pdf: Path | None = None) -> FigureResult:
    """Draw and save (PNG and PDF)."""
    fig, res = draw(runs, gpus)
    save(fig, out_png, out_pdf)
    return res
