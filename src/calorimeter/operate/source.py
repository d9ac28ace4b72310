"""What ``calorimeter status`` reads: a sweep file (planned now), or a results folder (its ``plan.json``).

A results folder is ``results/<sweep>/`` (the one with ``plan.json``, written by the workflow's ``plan`` rule), or a
folder holding exactly one such sweep folder (``results/``, or a copied run's top folder). Its cells are found where
the plan says they are measured: ``<folder>/../<cell's sweep>/cells/<cell_id>/`` (a ``subset_of`` sweep's cells stay
with their base sweep).
"""

from __future__ import annotations

import json
from pathlib import Path

from calorimeter.plan.cell import Cell
from calorimeter.plan.config import load_sweep_config, sweep_lines
from calorimeter.plan.config_errors import ConfigError, short
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.plan import Plan, PlannedCell, make_plan, plan_file
from calorimeter.records.job import read_job_record
from calorimeter.records.legacy import upgrade_plan_cell

PLAN_JSON = "plan.json"
#: keys of a plan.json cell that are neither parameters nor estimates
NOT_ESTIMATES = ("status", "reasons", "notes")


def sweep_folder(folder: Path) -> Path:
    """The sweep folder (with ``plan.json``) a results folder names."""
    if (folder / PLAN_JSON).is_file():
        return folder
    found = sorted(p.parent for p in folder.glob(f"*/{PLAN_JSON}"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigError(f"{short(str(folder))}: no {PLAN_JSON} here or in a folder below it (the workflow writes "
                          "it when a sweep starts): give the sweep file instead")
    raise ConfigError(f"{short(str(folder))} holds {len(found)} sweeps ({', '.join(p.name for p in found[:8])}"
                      f"{', ...' if len(found) > 8 else ''}): name one of their folders")


def _profile_steps(folder: Path) -> int:
    """The sweep's profiled steps per cell, from a launch record of one of its cells (0 if none is found)."""
    for path in folder.glob("cells/*/attempts/*/job.json"):
        job = read_job_record(path)
        if job is not None:
            return job.launcher.telemetry.profile_steps
    return 0


def plan_from_results(folder: str | Path) -> Plan:
    """The plan a results folder's ``plan.json`` records (cells, plan status, reasons, estimates)."""
    root = sweep_folder(Path(folder).expanduser())
    path = root / PLAN_JSON
    try:
        doc = json.loads(path.read_text())
        rows: list[JsonObject] = [upgrade_plan_cell(c) for c in doc["cells"]]
        name = str(doc.get("sweep") or root.name)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a plan ({type(e).__name__}: {short(str(e))})") from None
    cells = []
    for row in rows:
        try:
            cell = Cell.from_dict(row)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{path}: cell {short(str(row.get('cell_id')))} cannot be read "
                              f"({short(str(e))})") from None
        if row.get("cell_id") not in (None, cell.cell_id):
            raise ConfigError(f"{path}: cell {short(str(row['cell_id']))} was planned by another version of "
                              f"calorimeter (its id is now {cell.cell_id}): give the sweep file instead")
        params = cell.to_dict()
        estimates = {k: float(v) for k, v in row.items() if k not in params and k not in NOT_ESTIMATES
                     and isinstance(v, int | float) and not isinstance(v, bool)}
        cells.append(PlannedCell(cell, str(row.get("status", "planned")), list(row.get("reasons") or []), estimates))
    config = {"sweep": name, "_results_folder": str(root), "telemetry": {"profile_steps": _profile_steps(root)}}
    return Plan(name, str(root.parent), config, cells)


def load_plan(target: str, results_dir: str | None = None) -> Plan:
    """The plan of a sweep file (``results_dir`` overrides its results folder, as ``--config results_dir=``) or
    of a results folder."""
    path = Path(target).expanduser()
    if path.is_dir():
        if results_dir:
            raise ConfigError("--results-dir goes with a sweep file; a results folder names its cells itself")
        return plan_from_results(path)
    if not results_dir:
        return plan_file(target)

    over = {"results_dir": results_dir}
    return make_plan({**load_sweep_config([target], over), "_source": target,
                      "_lines": sweep_lines([target], over)})
