"""Fig. 17, per-GPU thermal imbalance: time-weighted average and peak GPU temperature per GPU and configuration
(with a per-GPU average row and node boundaries), and the SM-clock counterpart (average and minimum clock)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from calorimeter.figures.common import FigureResult, save
from calorimeter.figures.heatmaps import draw_heatmaps

NAME_TEMPERATURE = "fig17_temperature"
NAME_CLOCK = "fig17_sm_clock"
TEMPERATURE = [("temp_avg_c", "Avg. temperature (°C)", "YlOrRd", "linear", 1.0),
               ("temp_peak_c", "Peak temperature (°C)", "YlOrRd", "linear", 1.0)]
CLOCK = [("sm_clock_avg_mhz", "Avg. SM clock (MHz)", "viridis", "linear", 1.0),
         ("sm_clock_min_mhz", "Min. SM clock (MHz)", "viridis", "linear", 1.0)]


def draw_temperature(runs: pd.DataFrame, gpus: pd.DataFrame) -> tuple[plt.Figure, FigureResult]:
    """Temperature heatmaps (left open) and what they drew."""
    return draw_heatmaps(runs, gpus, TEMPERATURE, NAME_TEMPERATURE, "Fig. 17: per-GPU temperature", avg_row=True)


def draw_clock(runs: pd.DataFrame, gpus: pd.DataFrame) -> tuple[plt.Figure, FigureResult]:
    """SM-clock heatmaps (left open) and what they drew."""
    return draw_heatmaps(runs, gpus, CLOCK, NAME_CLOCK, "Fig. 17 (clock): per-GPU SM clock", avg_row=True)


def plot_temperature(runs: pd.DataFrame, gpus: pd.DataFrame, out_png: Path,
                     out_pdf: Path | None = None) -> FigureResult:
    """Draw and save the temperature heatmaps."""
    fig, res = draw_temperature(runs, gpus)
    save(fig, out_png, out_pdf)
    return res


def plot_clock(runs: pd.DataFrame, gpus: pd.DataFrame, out_png: Path, out_pdf: Path | None = None) -> FigureResult:
    """Draw and save the SM-clock heatmaps."""
    fig, res = draw_clock(runs, gpus)
    save(fig, out_png, out_pdf)
    return res
