"""Which cells each figure draws, from cell parameters only (so the report's captions can name them before
anything is measured)."""

from __future__ import annotations

import pandas as pd

from calorimeter.figures import FIGURES
from calorimeter.figures.common import order_configs


def figure_cells(name: str, cells: list[dict]) -> list[str]:
    """Cell ids a figure draws (in x order), given the plan's cells (dicts of parameters and status).

    Figures that draw every cell (throughput, throttle, scale comparison) or pick one at render time (timeline:
    the hottest measured cell) return every cell.
    """
    if not cells:
        return []
    df = pd.DataFrame(cells)
    sel = getattr(FIGURES[name], "select", None)
    out = sel(df) if sel is not None else order_configs(df)
    return list(out["cell_id"]) if len(out) else []
