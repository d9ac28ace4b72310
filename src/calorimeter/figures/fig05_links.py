"""Fig. 5, per-GPU NVLink receive volume of one training iteration (GB): each GPU's bytes received over the measured
steps divided by the cell's measured steps (the measured window is time-bound, so its step count differs per cell
and per repetition; a total over it would shade one configuration's repetitions differently). Rows are the
configurations (baseline cells), columns the GPUs, node boundaries marked. Linear from zero unless the volumes span
two decades (then log).

The study's second panel, PCIe receive volume, is not drawn: on the GPU nodes measured so far the NVML PCIe byte
counters read 3-14 times the whole pipeline traffic on middle pipeline stages while that traffic provably moves over
NVLink (the NVLink counters match it to 0.01%), so they do not measure this training's transfers (docs/findings.md,
"PCIe byte counters"). The values stay in ``gpus.parquet``.
"""

from __future__ import annotations

import pandas as pd

from calorimeter.figures.common import Tables, needs_gpu_telemetry
from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig05_links"
TABLES = ("runs", "gpus")
TITLE = "Fig. 5: per-GPU NVLink receive volume per iteration"
PANELS = [("nvlink_rx_bytes", "NVLink Rx per iteration (GB)", "Greens", "volume", 1e-9, "measured_steps")]
NOT_DRAWN = ["PCIe Rx volume (the study's second panel): the NVML PCIe byte counters do not measure this "
             "training's transfers on the GPU nodes measured so far (docs/findings.md, 'PCIe byte counters')"]
draw = heatmap_figure(NAME, PANELS, TITLE, notes=NOT_DRAWN)


def needs(tables: Tables) -> str:
    """Why the sweep cannot draw the figure: no GPU telemetry, or one GPU per cell (no GPU-to-GPU traffic)."""
    why = needs_gpu_telemetry(tables)
    if why:
        return why
    runs = tables["runs"]
    ok = runs[runs["status"] == "ok"]
    if len(ok) and (pd.to_numeric(ok["world_size"], errors="coerce") <= 1).all():
        return "one GPU per cell: no traffic between GPUs to draw (needs cells on two GPUs or more)"
    return ""


__all__ = ["NAME", "TABLES", "TITLE", "draw", "needs", "select"]
