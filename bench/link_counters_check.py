"""Check the NVML link byte counters of shipped records against the pipeline's known transfers.

For every measured pipeline cell whose only NVLink traffic is the pipeline's (dense, tp = 1, dp = 1), prints per
GPU the bytes its stage must receive (calorimeter.analysis.links.pipeline_rx_bytes), the NVLink receive counter and
the PCIe receive counter over the measured steps.

    python bench/link_counters_check.py [results/reference/*/*/tables ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from calorimeter.analysis.links import pipeline_link_check
from calorimeter.analysis.tables import read_tables

dirs = [Path(p) for p in sys.argv[1:]] or sorted(Path("results/reference").glob("*/*/tables"))
for d in dirs:
    t = read_tables(d, ("runs", "gpus"))
    chk = pipeline_link_check(t["runs"], t["gpus"])
    for r in chk.itertuples(index=False):
        print(f"{r.cell_id[:48]:<48} stage {r.stage} expected {r.expected_rx_bytes / 1e9:7.3f} GB  "
              f"NVLink rx {r.nvlink_rx_bytes / 1e9:7.3f} GB (x{r.nvlink_ratio:.4f})  "
              f"PCIe rx {r.pcie_rx_bytes / 1e9:7.2f} GB")
