"""``calorimeter status``: the state of every cell of a sweep, counts per state and the ETA, as a table or JSON."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass

from calorimeter.launch.output import describe_outputs
from calorimeter.operate.eta import Eta, estimate, format_duration, n_cells
from calorimeter.operate.state import STATES, CellStatus, cell_status, open_job_ids, slurm_view
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.plan import Plan, make_plan
from calorimeter.projection.cost import SweepCost, sweep_cost
from calorimeter.records.paths import CellPaths


@dataclass
class SweepStatus:
    """Every cell's state, in plan order."""

    plan: Plan
    cells: list[CellStatus]
    eta: Eta
    time_s: float
    slurm_reachable: bool

    @property
    def counts(self) -> dict[str, int]:
        """Cells per state (states in :data:`STATES` order, only those present)."""
        c = Counter(cs.state for cs in self.cells)
        return {s: c[s] for s in STATES if c[s]}


def cell_folders(plan: Plan) -> list[CellPaths]:
    """The folder of every cell of the plan (a subset sweep's cells stay with their own sweep)."""
    return [CellPaths.of(plan.results_dir, pc.cell.sweep, pc.cell.cell_id) for pc in plan.cells]


def sweep_status(plan: Plan, now: float | None = None, cost: SweepCost | None = None) -> SweepStatus:
    """The state of every cell of ``plan`` (SLURM asked once for all open jobs); ``cost``: its projected wall times
    (default: priced with the committed calibration), the ETA's start until a cell of each hardware finishes."""
    now = time.time() if now is None else now
    folders = cell_folders(plan)
    jobs = open_job_ids([f for pc, f in zip(plan.cells, folders, strict=True) if pc.status == "planned"])
    scheduler = slurm_view(jobs)
    cells = [cell_status(pc, f, scheduler, now) for pc, f in zip(plan.cells, folders, strict=True)]
    cost = cost if cost is not None else sweep_cost(plan)
    eta = estimate(plan.cells, cells, plan.settings.telemetry.profile_steps,
                   cost.by_id())
    return SweepStatus(plan, cells, eta, now, scheduler is not None)


def _short(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _detail(cs: CellStatus) -> str:
    if cs.progress is not None and cs.state in ("running", "interrupted", "unknown"):
        restart = f" (run {cs.restart + 1} after a requeue)" if cs.restart else ""
        return _short("; ".join(x for x in (cs.progress.describe() + restart, cs.note) if x), 120)
    return _short("; ".join(x for x in (cs.reason, cs.note) if x), 120)


COLUMNS = ("cell", "state", "class", "job", "att", "elapsed", "progress / reason")
#: a failed cell's last lines shown per rank
OUTPUT_LINES = 2


def format_table(st: SweepStatus, states: set[str] | None = None) -> str:
    """The table: one row per cell (only ``states`` if given), then counts, ETA and what to do next."""
    rows = [(cs.cell_id, cs.state, (cs.failure_class or "") if cs.state not in ("ok", "pruned") else "",
             cs.job_id or "", str(cs.attempts) if cs.attempts else "", format_duration(cs.elapsed_s)
             if cs.elapsed_s is not None else "", _detail(cs))
            for cs in st.cells if not states or cs.state in states]
    rows = [tuple("" if v is None else v for v in r) for r in rows]
    widths = [max([len(COLUMNS[i]), *(len(r[i]) for r in rows)]) for i in range(len(COLUMNS) - 1)]
    fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1]  # noqa: E731
    shown = [cs for cs in st.cells if not states or cs.state in states]
    lines = [fmt(COLUMNS)]
    for r, cs in zip(rows, shown, strict=True):
        lines.append(fmt(r))
        # a cell that did not end ok: what each rank printed last, the rank the reason names first
        lines.extend(line if len(line) <= 160 else line[:157] + "..."
                     for line in describe_outputs(cs.outputs, OUTPUT_LINES, "    "))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.time_s))
    counts = ", ".join(f"{n} {s}" for s, n in st.counts.items())
    lines.append(f"sweep {st.plan.sweep} at {when}: {n_cells(len(st.cells))}: {counts}")
    lines.append(st.eta.describe())
    lines.extend(hints(st))
    return "\n".join(lines)


def hints(st: SweepStatus) -> list[str]:
    """What to do next about failed and interrupted cells."""
    c, src = st.counts, st.plan.config.get("_source") or "<sweep file>"
    out = []
    if not st.slurm_reachable:
        out.append("note: SLURM commands are not available here: open SLURM attempts are shown as unknown")
    failed = [cs for cs in st.cells if cs.state == "failed"]
    if failed:
        classes = Counter(cs.failure_class for cs in failed)
        out.append(f"{n_cells(len(failed))} failed ({', '.join(f'{n} {k}' for k, n in classes.items())}): rerun "
                   f"with: calorimeter rerun {src} --failed")
    if c.get("oom"):
        out.append(f"{n_cells(c['oom'])} out of memory: after changing what made them run out of memory, rerun "
                   f"with: calorimeter rerun {src} --oom")
    if c.get("interrupted"):
        out.append(f"{n_cells(c['interrupted'])} interrupted: run the sweep's snakemake command again (after "
                   f"--unlock if it asks) to collect or resubmit, or: calorimeter rerun {src} --failed")
    return out


def to_json(st: SweepStatus) -> str:
    """Machine-readable status."""
    doc: JsonObject = {"sweep": st.plan.sweep, "results_dir": str(st.plan.results_dir), "time_s": st.time_s,
                           "counts": st.counts, "eta": st.eta.to_dict(), "slurm_reachable": st.slurm_reachable,
                           "cells": [cs.to_dict() for cs in st.cells]}
    return json.dumps(doc, indent=1, default=str)


def progress_line(config: JsonObject, now: float | None = None) -> str:
    """One line on where a sweep stands, for the train rule's log as each cell finishes: ``sweep S: 3 of 10 cells
    finished (2 ok, 1 failed), 1 running; ETA: ~4 min (...)``."""
    st = sweep_status(make_plan(dict(config)), now)
    c = st.counts
    planned = [cs for cs, pc in zip(st.cells, st.plan.cells, strict=True) if pc.status == "planned"]
    done = [cs for cs in planned if cs.state in ("ok", "oom", "failed")]
    kinds = ", ".join(f"{c[s]} {s}" for s in ("ok", "oom", "failed") if c.get(s))
    running = c.get("running", 0) + c.get("queued", 0)
    return (f"sweep {st.plan.sweep}: {len(done)} of {n_cells(len(planned))} finished"
            f"{f' ({kinds})' if kinds else ''}, {running} running or queued; {st.eta.describe()}")
