"""Which cells the projection can price at all: training cells on GPUs (light: no pandas, no fitted model, so the
cost before running can tell a CPU or ``command`` cell apart without loading the projection)."""

from __future__ import annotations

from calorimeter.plan.cell import TRAINING_KINDS, Cell
from calorimeter.plan.hardware import accelerator_of


def uncovered(cell: Cell) -> str:
    """Why the projection cannot price a cell at all ("" when it can try)."""
    if cell.kind not in TRAINING_KINDS:
        return f"kind {cell.kind}: not a training cell the projection models"
    if accelerator_of(cell.hardware) == "cpu":
        return "CPU ranks: the projection is calibrated on GPUs only"
    return ""


__all__ = ["uncovered"]
