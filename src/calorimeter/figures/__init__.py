"""Figures: one module per figure family, each a function of the aggregated tables.

``FIGURES`` maps each output name to the tables it reads and a renderer ``render(tables, png, pdf)``; the
workflow's figure rules and the benchmark use it. Every renderer draws what exists and says what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from calorimeter.figures import (
    fig04_parallelism,
    fig05_links,
    fig08_optimization,
    fig10_kernels,
    fig13_microbatch,
    fig15_stages,
    fig17_thermal,
    scale_compare,
    throttle,
    timeline,
)
from calorimeter.figures.common import FigureResult
from calorimeter.figures.throughput import plot_throughput

Tables = dict[str, pd.DataFrame]


def _throughput(t: Tables, png: Path, pdf: Path | None) -> FigureResult:
    n = plot_throughput(t["runs"], png, pdf)
    return FigureResult("throughput", n, list(t["runs"]["cell_id"]))


@dataclass(frozen=True)
class FigureSpec:
    """A figure of the report: the tables it reads and its renderer."""

    tables: tuple[str, ...]
    render: Callable[[Tables, Path, Path | None], FigureResult]


FIGURES: dict[str, FigureSpec] = {
    "throughput": FigureSpec(("runs",), _throughput),
    "fig04_parallelism": FigureSpec(("runs",), lambda t, p, d: fig04_parallelism.plot(t["runs"], p, d)),
    "fig05_links": FigureSpec(("runs", "gpus"), lambda t, p, d: fig05_links.plot(t["runs"], t["gpus"], p, d)),
    "fig08_optimization": FigureSpec(("runs",), lambda t, p, d: fig08_optimization.plot(t["runs"], p, d)),
    "fig10_kernels": FigureSpec(("runs", "kernels"),
                                lambda t, p, d: fig10_kernels.plot(t["runs"], t["kernels"], p, d)),
    "fig13_microbatch": FigureSpec(("runs",), lambda t, p, d: fig13_microbatch.plot(t["runs"], p, d)),
    "fig15_stages": FigureSpec(("runs", "kernels"),
                               lambda t, p, d: fig15_stages.plot(t["runs"], t["kernels"], p, d)),
    "fig17_temperature": FigureSpec(("runs", "gpus"),
                                    lambda t, p, d: fig17_thermal.plot_temperature(t["runs"], t["gpus"], p, d)),
    "fig17_sm_clock": FigureSpec(("runs", "gpus"),
                                 lambda t, p, d: fig17_thermal.plot_clock(t["runs"], t["gpus"], p, d)),
    "scale_compare": FigureSpec(("runs",), lambda t, p, d: scale_compare.plot(t["runs"], p, d)),
    "timeline": FigureSpec(("runs", "timeseries", "steps"),
                           lambda t, p, d: timeline.plot(t["runs"], t["timeseries"], t["steps"], p, d)),
    "throttle": FigureSpec(("runs", "gpus"), lambda t, p, d: throttle.plot(t["runs"], t["gpus"], p, d)),
}


def render_all(tables: Tables, out_dir: Path, pdf: bool = True) -> dict[str, FigureResult]:
    """Render every figure into ``out_dir`` (``<name>.png`` and ``.pdf``)."""
    out_dir = Path(out_dir)
    return {name: spec.render(tables, out_dir / f"{name}.png", out_dir / f"{name}.pdf" if pdf else None)
            for name, spec in FIGURES.items()}
