"""The engine benchmark's measurements (``bench/engine_speed.py``: ``call*/engine_speed.jsonl``) as measured cells.

A benchmark set has no sweep tables: each line of ``engine_speed.jsonl`` is one variant with its cell id, its
metrics (iteration time, tokens/s, MFU), the engine's choices and the kernel breakdown of rank 0's profiled step. The
cell is rebuilt from its id (bf16, one node), the fingerprint from the recorded engine (package versions other than
torch and the power limit are not in these lines: ``unrecorded``). No power was sampled, so these cells calibrate
and validate time and throughput only; their power and energy are NaN. Variants that override a knob the engine no
longer has (``sm_carveout``) are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from calorimeter.plan.cell import Cell, parse_cell_id
from calorimeter.projection.fingerprint import Fingerprint

#: the benchmark's files, one per run on a GPU node
JSONL = "engine_speed.jsonl"


def cell_from_id(cell_id: str, sweep: str = "engine-speed") -> Cell:
    """The cell a benchmark variant's id names (:func:`calorimeter.plan.cell.parse_cell_id`).

    Raises:
        ValueError: it names no cell.
    """
    return parse_cell_id(cell_id, sweep)


def is_engine_speed_set(source: str | Path) -> bool:
    """Whether a folder holds engine-benchmark calls (``call*/engine_speed.jsonl``) and no sweep tables."""
    return any(Path(source).glob(f"*/{JSONL}"))


def load_engine_speed(source: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """(runs rows, long kernel rows as the kernels table has them, dropped variants) of one benchmark folder.

    Each variant of each call is its own cell: ``<cell id>@<call>/<variant>``; its ``config_id`` is the cell's
    configuration id (the same cell in two calls is two repetitions of one configuration).
    """
    runs, kernels, dropped = [], [], {}
    for path in sorted(Path(source).glob(f"*/{JSONL}")):
        call = path.parent.name
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            if "cell_id" not in d:  # a peer baseline (plain FSDP2): not this engine
                dropped[f"{call}/{d.get('variant')}"] = "not the engine (peer baseline)"
                continue
            cid = f"{d['cell_id']}@{call}/{d['variant']}"
            if d.get("status") != "ok" or not d.get("metrics"):
                dropped[cid] = f"status {d.get('status')}"
                continue
            if (d.get("overrides") or {}).get("sm_carveout"):
                dropped[cid] = "SM carveout: a knob the engine no longer has"
                continue
            cell = cell_from_id(d["cell_id"])
            fp = Fingerprint.of_engine(d.get("engine") or {})
            row = {**cell.to_dict(), **d["metrics"], "cell_id": cid, "config_id": cell.config_id,
                   "status": "ok", "source": str(source), **fp.to_dict(), "fingerprint": fp.key,
                   "recorded_at": "", "variant": d["variant"]}
            runs.append(row)
            for r in (d.get("kernels") or {}).get("ranks", []):
                for key, v in r.items():
                    if key.endswith("_sum_s"):
                        kernels.append({"cell_id": cid, "rank": int(r["rank"]), "stage": 0,
                                        "category": key.removesuffix("_sum_s"), "sum_s": float(v), "count": 0,
                                        "busy_s": float(r["busy_s"]), "span_s": float(r["span_s"]),
                                        "comm_exposed_s": float(r.get("comm_exposed_s", 0.0))})
    return pd.DataFrame(runs), pd.DataFrame(kernels), dropped


__all__ = ["cell_from_id", "is_engine_speed_set", "load_engine_speed"]
