"""Which cells each figure draws, from cell parameters only (so the report's captions can name them before
anything is measured)."""

from __future__ import annotations

import pandas as pd

from calorimeter.figures import ALL_KINDS, FIGURES
from calorimeter.figures.common import order_configs
from calorimeter.plan.kinds import DEFAULT_KIND, kinds_where


def figure_cells(name: str, cells: list[dict]) -> list[str]:
    """Cell ids a figure draws (in x order), given the plan's cells (dicts of parameters and status).

    Figures that draw every cell (throughput, throttle, scale comparison) return every cell; a figure that picks
    its cell when drawing (``PICKED_AT_RENDER``: the timeline's hottest measured cell) returns none (its caption
    says so, the figure's title and JSON name the cell).
    """
    if not cells or getattr(FIGURES[name], "PICKED_AT_RENDER", False):  # named in the figure and its JSON instead
        return []
    df = pd.DataFrame(cells)
    if name not in ALL_KINDS and "kind" in df.columns:  # as render(): training figures draw training cells only
        df = df[df["kind"].fillna(DEFAULT_KIND).astype(str).isin(kinds_where(trains_model=True))]
        if df.empty:
            return []
    sel = getattr(FIGURES[name], "select", None)
    out = sel(df) if sel is not None else order_configs(df)
    return list(out["cell_id"]) if len(out) else []
