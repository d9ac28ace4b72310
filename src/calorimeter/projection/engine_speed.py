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
import re
from pathlib import Path

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.projection.fingerprint import Fingerprint

_ID = re.compile(r"^(?P<model>.+?)_(?P<hw>[a-z0-9]+)-(?P<nodes>\d+)x(?P<gpn>\d+)_tp(?P<tp>\d+)-pp(?P<pp>\d+)-dp\d+"
                 r"(?:-ep(?P<ep>\d+))?(?P<sp>-sp)?_z(?P<z>\d)_rc-(?P<rc>[a-z]+)_ov-(?P<ov>on|off)"
                 r"_mb(?P<mb>\d+)-gb(?P<gb>\d+)-s(?P<s>\d+)$")
#: the benchmark's files, one per device call
JSONL = "engine_speed.jsonl"


def cell_from_id(cell_id: str, sweep: str = "engine-speed") -> Cell:
    """A bf16 train cell from a plain cell id (no repetition, placement, dataset or split suffix).

    Raises:
        ValueError: the id has another form.
    """
    m = _ID.match(cell_id)
    if not m:
        raise ValueError(f"cell id {cell_id!r} is not a plain train cell id")
    g = m.groupdict()
    return Cell(sweep=sweep, model=g["model"], hardware=g["hw"], nodes=int(g["nodes"]), gpus_per_node=int(g["gpn"]),
                tp=int(g["tp"]), pp=int(g["pp"]), ep=int(g["ep"] or 1), sequence_parallel=bool(g["sp"]),
                zero_stage=int(g["z"]), recompute=g["rc"], overlap=g["ov"] == "on", micro_batch=int(g["mb"]),
                global_batch=int(g["gb"]), seq_len=int(g["s"]), precision="bf16")


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
