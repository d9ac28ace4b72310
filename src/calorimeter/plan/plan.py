"""The plan of a sweep: every cell with its status (``planned`` or ``pruned`` + reasons) and estimates."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.checks import (
    build_memory_reasons,
    divisibility_reasons,
    engine_reasons,
    memory_reasons,
    placement_checks,
)
from calorimeter.plan.config import ConfigError, load_config, validate_config
from calorimeter.plan.definitions import definitions_of
from calorimeter.plan.flops import iteration_flops
from calorimeter.plan.grid import expand
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind, kind_reasons
from calorimeter.plan.memory import estimate_memory
from calorimeter.plan.models import get_model, padded_vocab_size, parameter_count
from calorimeter.plan.settings import LauncherSettings
from calorimeter.plan.time_limit import time_limit_reasons
from calorimeter.plan.vocabulary import PLAN_COLUMNS


@dataclass
class PlannedCell:
    """A cell and what the checks said about it."""

    cell: Cell
    status: str
    reasons: list[str] = field(default_factory=list)
    estimates: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        """Flat dict: parameters, status, reasons, estimates, notes."""
        return {**self.cell.to_dict(), "status": self.status, "reasons": self.reasons, **self.estimates,
                "notes": self.notes}


@dataclass
class Plan:
    """All cells of one sweep config (``config``: the validated config, every schema default filled in)."""

    sweep: str
    results_dir: str
    config: JsonObject
    cells: list[PlannedCell]

    @property
    def settings(self) -> LauncherSettings:
        """The sweep's launcher, telemetry and placement settings."""
        return LauncherSettings.from_config(self.config)

    @property
    def runnable(self) -> list[PlannedCell]:
        """Cells that will be submitted."""
        return [c for c in self.cells if c.status == "planned"]

    def get(self, cell_id: str) -> PlannedCell:
        """A cell by id."""
        for c in self.cells:
            if c.cell.cell_id == cell_id:
                return c
        raise KeyError(f"no cell {cell_id!r} in sweep {self.sweep!r}")


def check_cell(cell: Cell, memory_check: bool = True) -> PlannedCell:
    """Run every check on one cell."""
    own = kind_reasons(cell)
    if own or not get_kind(cell.kind).trains_model:  # a kind's own checks first; without a model, only them
        return PlannedCell(cell, "pruned" if own else "planned", own, {})
    m = get_model(cell.model)
    hw = get_profile(cell.hardware)
    reasons = divisibility_reasons(cell, m)
    estimates: dict[str, float] = {"params_total": float(parameter_count(m))}
    if not reasons:
        reasons += engine_reasons(cell, m)
        est = estimate_memory(m, cell, hw)
        estimates.update(est.to_dict())
        if memory_check:
            reasons += memory_reasons(est, hw) + build_memory_reasons(cell, m, hw)
        fl = iteration_flops(m, cell.seq_len, cell.global_batch, cell.recompute, cell.recompute_layers, cell.pp,
                             padded_vocab=padded_vocab_size(m, cell.tp),
                             lora_rank=cell.adapter_rank)
        estimates["model_flops_per_iteration"] = fl.model_flops
        pl_reasons, notes, pl_estimates = placement_checks(cell, m, hw, memory_check)
        reasons += pl_reasons
        estimates.update(pl_estimates)
    else:
        notes = []
    return PlannedCell(cell, "pruned" if reasons else "planned", reasons, estimates, notes)


def make_plan(config: JsonObject) -> Plan:
    """Validate a sweep config (``_source``: the file it came from, for messages and ``subset_of``) and plan it.

    The plan keeps the validated config: the workflow reads its settings from there, so the config is validated
    once per run.
    """
    return _plan(validate_config(config, str(config.get("_source", "config"))))


def _plan(cfg: JsonObject) -> Plan:
    """``Plan.sweep`` names the folder of the plan, tables and figures; cells keep their own sweep (a ``subset_of``
    sweep has its own name but selects cells of its base sweep, which stay where the base measures them)."""
    cells = [check_cell(c, cfg["memory_check"]) for c in expand(cfg)]
    # the models and hardware the sweep (and the sweeps it selects from) defined: they travel to the train rule's
    # script and the ranks with the config (calorimeter.plan.definitions)
    cfg["_definitions"] = definitions_of()
    _prune_beyond_time_limit(cells, cfg)
    name = cfg["sweep"]
    if "subset_of" in cfg and any(pc.cell.sweep == name for pc in cells):
        raise ConfigError(f"{cfg.get('_source', 'config')}: sweep {name!r} is the name of the sweep this one is a "
                          "subset of; a subset writes its own plan and tables: give it another name")
    return Plan(name, cfg["results_dir"], cfg, cells)


def _prune_beyond_time_limit(cells: list[PlannedCell], cfg: JsonObject) -> None:
    """Prune the planned cells that cannot finish within ``launcher.timeout_min`` (:mod:`calorimeter.plan.time_limit`).
    """
    settings = LauncherSettings.from_config(cfg)
    for pc in cells:
        if pc.status == "planned":
            why = time_limit_reasons(pc.cell, pc.estimates, settings.timeout_min, settings.telemetry.profile_steps)
            if why:
                pc.status, pc.reasons = "pruned", [*pc.reasons, *why]


def plan_file(path: str | Path) -> Plan:
    """Plan a sweep file."""
    return _plan(load_config(path))


#: the plan table's columns: the parameters it shows (the cell's vocabulary), the id followed by the plan status and
#: the model by its size, then the memory estimate and the reasons
TABLE_COLUMNS = (PLAN_COLUMNS[0], "status", PLAN_COLUMNS[1], "params_b", *PLAN_COLUMNS[2:], "mem_total_gb", "reasons")


def format_table(plan: Plan, extra: dict[str, dict[str, str]] | None = None) -> str:
    """Human-readable table of a plan; ``extra``: more columns (name -> cell id -> text) before the reasons."""
    extra = extra or {}
    rows = [{**plan_row(c), **{k: v.get(c.cell.cell_id, "") for k, v in extra.items()}} for c in plan.cells]
    cols = [*TABLE_COLUMNS[:-1], *extra]
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) if rows else len(k) for k in cols}
    head = "  ".join(k.ljust(widths[k]) for k in cols) + "  reasons"
    lines = [head]
    for r in rows:
        lines.append("  ".join(r[k].ljust(widths[k]) for k in cols) + "  " + r["reasons"])
    n_pl = len(plan.runnable)
    lines.append(f"{len(plan.cells)} cells: {n_pl} planned, {len(plan.cells) - n_pl} pruned (sweep {plan.sweep})")
    return "\n".join(lines)


def plan_row(c: PlannedCell) -> dict[str, str]:
    """One table row as strings."""
    d = c.to_dict()
    out = {k: str(d.get(k, "")) for k in TABLE_COLUMNS}
    out["params_b"] = f"{d['params_total'] / 1e9:.2f}" if d.get("params_total") else ""
    if "mem_total_gb" in d:
        out["mem_total_gb"] = f"{d['mem_total_gb']:.1f}"
    out["reasons"] = "; ".join(c.reasons) or "; ".join(c.notes)
    return out


def format_json(plan: Plan, extra: dict[str, JsonObject] | None = None, **more: Any) -> str:
    """The plan as JSON (every parameter of every cell; ``extra``: cell id -> more keys of that cell; ``more``: more
    top-level keys)."""
    extra = extra or {}
    return json.dumps({"sweep": plan.sweep, "results_dir": plan.results_dir, **more,
                       "cells": [{**c.to_dict(), **extra.get(c.cell.cell_id, {})} for c in plan.cells]}, indent=1,
                      default=str)
