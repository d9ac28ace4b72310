"""Which cells the projection can price at all (training cells on GPUs), and a reason's kind to count cells by; light
(no pandas, no fitted model), so the cost before running can tell a CPU or ``command`` cell apart without loading the
projection."""

from __future__ import annotations

import re

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import accelerator_of
from calorimeter.plan.kinds import get_kind


def uncovered(cell: Cell) -> str:
    """Why the projection cannot price a cell at all ("" when it can try)."""
    if not get_kind(cell.kind).trains_model:
        return f"kind {cell.kind}: not a training cell the projection models"
    if accelerator_of(cell.hardware) == "cpu":
        return "CPU ranks: the projection is calibrated on GPUs only"
    return ""


def reason_kind(reason: str) -> str:
    """A reason without its numbers and details, to count cells by it: ``estimated memory # GB per device exceeds the
    # GB of h200`` (the first clause, before any parenthesis or semicolon)."""
    return re.sub(r"(?<![A-Za-z\d.])\d+(\.\d+)?", "#", str(reason).split(" (")[0].split(";")[0]).strip()


__all__ = ["reason_kind", "uncovered"]
