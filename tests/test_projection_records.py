"""The projection reads the cells that ran from their records: a sweep's own models, the engine knobs the runs table
has no column for, a pipeline split as the table writes it; a peer's command is never projected as the engine; a
pipeline schedule the model does not time is refused. On the committed 4x H100 layout runs."""

from __future__ import annotations

import math

from conftest import ROOT

from calorimeter.plan.models import BUILTIN_MODELS
from calorimeter.projection.calibration import calibrate_all
from calorimeter.projection.measured import cell_from_row, load_measured
from calorimeter.projection.model import Projector

RUN_A = ROOT / "results" / "reference" / "h100x4-layouts-2026-11-28" / "h100x4-layouts-a"
DUALPIPEV = "llama3-8b-16l_h100-1x4_tp1-pp4-dp1-split3.5.4.4-dualpipev_z1_rc-none_ov-off_mb1-gb32-s8192"
ZERO1 = "llama3-8b-16l_h100-1x4_tp1-pp1-dp4_z1_rc-none_ov-off_mb1-gb32-s8192"
PEER = "cmd-torchtitan_llama3-8b-16l_mb1-gb32-s8192_h100-1x4"


def test_a_runs_table_split_is_read_as_the_split() -> None:
    row = {"cell_id": "x", "sweep": "s", "model": "llama3-8b-8l", "hardware": "h100", "nodes": 1,
           "gpus_per_node": 4, "tp": 1, "pp": 4, "pp_split": "[3, 5, 4, 4]"}
    assert cell_from_row(row).pp_split == (3, 5, 4, 4)
    assert cell_from_row({**row, "pp_split": ""}).pp_split is None


def test_committed_layout_run_is_read_as_it_ran() -> None:
    ms = load_measured([RUN_A])
    assert "llama3-8b-16l" not in BUILTIN_MODELS  # defined by the sweep file, read back from the records
    assert {ZERO1, DUALPIPEV} <= set(ms.runs.cell_id)
    assert PEER not in set(ms.runs.cell_id) and "not a training cell" in ms.dropped[PEER]
    cell = ms.cell(DUALPIPEV)
    assert cell.pp_schedule == "dualpipev" and cell.pp_split == (3, 5, 4, 4)
    assert ms.cell(ZERO1).pp_schedule is None


def test_a_schedule_the_model_does_not_time_is_refused() -> None:
    ms = load_measured([RUN_A])
    cal = next(iter(calibrate_all([str(RUN_A)], [], ms=ms).values()))
    proj = Projector(cal, relation="match", refuse=True)
    refused = proj.project(ms.cell(DUALPIPEV))
    assert refused["refused"].startswith("pipeline schedule dualpipev")
    assert math.isnan(refused["tokens_per_s_per_gpu"]) and math.isnan(refused["tokens_per_s_per_gpu_band"])
    assert not proj.project(ms.cell(ZERO1))["refused"].startswith("pipeline schedule")
    assert DUALPIPEV not in ms.calibration_cells() and ZERO1 in ms.calibration_cells()  # neither fitted nor scored
