"""Which cells each figure draws, from cell parameters only (so the report's captions can name them before
anything is measured)."""

from __future__ import annotations

import pandas as pd

from calorimeter.figures import (
    fig04_parallelism,
    fig08_optimization,
    fig10_kernels,
    fig13_microbatch,
    fig15_stages,
    heatmaps,
)
from calorimeter.figures.common import order_configs

SELECTORS = {
    "fig04_parallelism": fig04_parallelism.select,
    "fig05_links": heatmaps.select,
    "fig08_optimization": fig08_optimization.select,
    "fig10_kernels": fig10_kernels.select,
    "fig13_microbatch": fig13_microbatch.select,
    "fig15_stages": fig15_stages.select,
    "fig17_temperature": heatmaps.select,
    "fig17_sm_clock": heatmaps.select,
}


def figure_cells(name: str, cells: list[dict]) -> list[str]:
    """Cell ids a figure draws (in x order), given the plan's cells (dicts of parameters and status).

    Figures that draw every cell (throughput, throttle, scale comparison) or pick one at render time (timeline:
    the hottest measured cell) return every cell.
    """
    if not cells:
        return []
    df = pd.DataFrame(cells)
    sel = SELECTORS.get(name)
    out = sel(df) if sel is not None else order_configs(df)
    return list(out["cell_id"]) if len(out) else []
