"""Fig. 5, per-GPU NVLink receive volume over the measured phase (GB): rows are the configurations (baseline
cells), columns the GPUs, node boundaries marked. Linear from zero unless the volumes span two decades (then log).

The study's second panel, PCIe receive volume, is not drawn: on the lent nodes the NVML PCIe byte counters read
3-14 times the whole pipeline traffic on middle pipeline stages while that traffic provably moves over NVLink (the
NVLink counters match it to 0.01%), so they do not measure this training's transfers (docs/findings.md, "PCIe
byte counters"). The values stay in ``gpus.parquet``.
"""

from __future__ import annotations

from calorimeter.figures.heatmaps import heatmap_figure, select

NAME = "fig05_links"
TABLES = ("runs", "gpus")
PANELS = [("nvlink_rx_bytes", "NVLink Rx total (GB)", "Greens", "volume", 1e-9)]
NOT_DRAWN = ["PCIe Rx volume (the study's second panel): the NVML PCIe byte counters do not measure this "
             "training's transfers on the lent nodes (docs/findings.md, 'PCIe byte counters')"]
draw = heatmap_figure(NAME, PANELS, "Fig. 5: per-GPU NVLink receive volume", notes=NOT_DRAWN)

__all__ = ["NAME", "TABLES", "draw", "select"]
