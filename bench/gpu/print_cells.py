"""Print one line per cell record under a results folder (status, throughput, MFU (full attention), peak memory,
reason).

Usage: python3 bench/gpu/print_cells.py /tmp/res8
"""

import glob
import json
import sys
from pathlib import Path

from calorimeter.records.legacy import upgrade_record

for f in sorted(glob.glob(f"{sys.argv[1]}/*/cells/*/run.json")):
    r = upgrade_record(json.loads(Path(f).read_text()))
    m = r.get("metrics") or {}
    if m.get("kind") == "collectives":  # a calibration cell: best bus bandwidth per collective and group size
        best = ", ".join(f"{k} {v['busbw_max_gbyte_s']:.3g}" for k, v in sorted(m.get("collectives", {}).items()))
        print(f"{r['cell_id'][:64]:<64} {r['status']:<7} busbw GB/s: {best} {r.get('reason', '')[:160]}")
        continue
    # a value that was not measured (a failed cell, a command cell's peak memory) prints as nan, never as 0
    def num(v, scale: float = 1.0) -> float:
        return float("nan") if v is None else v * scale

    print(f"{r['cell_id'][:64]:<64} {r['status']:<7} {num(m.get('tokens_per_s_per_gpu')):>8.0f} tok/s/GPU "
          f"{num(m.get('tflops_per_gpu')):>6.1f} TF/GPU MFU {num(m.get('mfu_full'), 100):>5.1f}% "
          f"peak {num(r.get('peak_memory_bytes'), 1e-9):>6.1f} GB {r.get('reason', '')[:160]}")
