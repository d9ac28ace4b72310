"""The cell's vocabulary is the one list of its names: the cell's fields, the schema's grid keys, the tables' columns
and the cell id agree with it, and the one parser reads every id back."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from conftest import ROOT

from calorimeter.analysis.cell import PARAM_KEYS
from calorimeter.findings.select import CONFIG_PARAMS, pairs, param_value
from calorimeter.plan.cell import Cell, parse_cell_id
from calorimeter.plan.config import load_schema
from calorimeter.plan.grid import AXES as GRID_AXES
from calorimeter.plan.vocabulary import (
    AXES,
    CONFIGURATION,
    DERIVED,
    IDENTIFYING,
    PARAMETERS,
    RUN_COLUMNS,
    VOCABULARY,
)

BASE = Cell(sweep="s", model="llama3-8b", hardware="h200", nodes=1, gpus_per_node=8, tp=2, pp=2, precision="bf16")
#: another value of every field, for a cell of a kind where the field counts
OTHER = {"sweep": "t", "model": "tiny-gpt", "hardware": "h100", "nodes": 2, "gpus_per_node": 4, "tp": 4, "pp": 1,
         "ep": 2, "cp": 2, "sequence_parallel": True, "zero_stage": 3, "recompute": "full", "recompute_layers": 2,
         "overlap": True, "micro_batch": 2, "global_batch": 16, "seq_len": 256, "warmup": "fixed", "warmup_steps": 5,
         "warmup_max_steps": 7, "warmup_max_s": 9.0, "warmup_min_s": 3.0, "steady_window_s": 11.0,
         "steady_slope_c_per_min": 1.0,
         "measured_steps": 13, "measured_min_s": 3.0, "precision": "fp32", "dataset": "data/x", "seed": 1,
         "lr": 0.5, "pp_split": (20, 12), "engine": "other", "repeat": 2, "kind": "lora", "placement": "thermal",
         "lora_rank": 4, "command": "python x.py", "label": "x", "log_format": "megatron", "pp_schedule": "dualpipev",
         "bucket_elements": 5 * 10**8, "prefetch_elements": 0, "tp_comm_overlap": "ring"}


def test_the_vocabulary_names_the_cells_fields_and_derived_values_once() -> None:
    names = [n.name for n in VOCABULARY]
    assert len(names) == len(set(names))
    assert set(PARAMETERS) == {f.name for f in dataclasses.fields(Cell)} == set(OTHER)
    assert set(DERIVED) == set(BASE.to_dict()) - set(PARAMETERS)


def test_the_schemas_grid_keys_are_the_axes() -> None:
    cell_values = load_schema()["$defs"]["cell_values"]["properties"]
    assert set(cell_values) == {*AXES, "repeats"} and GRID_AXES == AXES
    assert set(load_schema()["$defs"]["parallel"]["properties"]) <= set(PARAMETERS)


def test_tables_and_findings_take_their_columns_from_it() -> None:
    assert PARAM_KEYS == RUN_COLUMNS and CONFIG_PARAMS == CONFIGURATION
    assert set(RUN_COLUMNS) <= set(PARAMETERS) | set(DERIVED)
    # a comparison that names a parameter no configuration has (a column no table carries) is refused, not ignored
    with pytest.raises(ValueError, match="lora_alpha"):
        pairs([], "kind", bool, bool, also=("lora_alpha",))


@pytest.mark.parametrize("name", sorted(OTHER))
def test_the_id_names_exactly_the_identifying_parameters(name: str) -> None:
    """Changing a parameter changes the id exactly when the vocabulary says the id names it (for a kind it applies
    to: ``lora_rank`` for lora cells, ``label`` for command cells)."""
    base = {"lora_rank": dataclasses.replace(BASE, kind="lora", pp=1),
            "label": dataclasses.replace(BASE, kind="command", label="y")}.get(name, BASE)
    changed = dataclasses.replace(base, **{name: OTHER[name]})
    assert (changed.cell_id != base.cell_id) == (name in IDENTIFYING), (base.cell_id, changed.cell_id)
    assert changed.config_id == changed.cell_id.removesuffix(f"_r{changed.repeat}")


def _every_id_part() -> list[Cell]:
    lora = dataclasses.replace(BASE, kind="lora", pp=1, lora_rank=8, repeat=1)
    knobs = dataclasses.replace(BASE, model="my_model", ep=2, cp=2, sequence_parallel=True, pp_split=(20, 12),
                                pp_schedule="dualpipev", zero_stage=3, bucket_elements=25 * 10**6,
                                prefetch_elements=123, recompute="selective", recompute_layers=2, overlap=True,
                                precision="fp32", dataset="data/tok.v1", placement="balanced", repeat=3)
    command = Cell(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=2, kind="command", label="fsdp2",
                   precision="fp32", repeat=1)
    machine = Cell(sweep="s", model="-", hardware="h200", nodes=2, gpus_per_node=8, kind="thermal-calibration")
    return [BASE, lora, knobs, command, dataclasses.replace(command, model="llama3-8b", label=None), machine]


def test_every_id_reads_back_to_its_cell() -> None:
    """Every form and part of an id, and every id of the committed tables."""
    committed = {i for t in (ROOT / "results" / "reference").glob("**/tables/runs.parquet")
                 for i in pd.read_parquet(t, columns=["cell_id"])["cell_id"].astype(str)}
    assert len(committed) > 100
    for cell in _every_id_part():
        back = parse_cell_id(cell.cell_id, "s")
        assert back.cell_id == cell.cell_id
        assert {k: getattr(back, k) for k in IDENTIFYING if k not in ("dataset", "label")} == \
            {k: getattr(cell, k) for k in IDENTIFYING if k not in ("dataset", "label")}
    assert all(parse_cell_id(i).cell_id == i for i in committed)
    for bad in ("", "x", "train_h200-1x2", "llama3-8b_h200-1x2_tp2-pp1-dp1_z1_rc-none_ov-on_mb1-gb8-s8_lora-q1"):
        with pytest.raises(ValueError, match="is not a cell id"):
            parse_cell_id(bad)


def test_the_parser_reads_what_the_engine_benchmark_names() -> None:
    cell = parse_cell_id("llama3-8b_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb8-s8192", "e")
    assert (cell.sweep, cell.tp, cell.sequence_parallel, cell.overlap, cell.precision, cell.seq_len) == (
        "e", 2, True, True, "bf16", 8192)


def test_what_only_the_id_names_keeps_configurations_apart_in_a_findings_pairs() -> None:
    """A TP overlap mechanism or a pipeline schedule is in a cell's id but in no runs-table column: a finding that
    varies recompute must not pair a cell of one mechanism (or schedule) with a cell of another. Read back from the
    configuration's id (``id_knobs``), the pairs are within a mechanism only; ids of another grammar know nothing
    beyond the columns."""
    from calorimeter.findings.select import configs
    from calorimeter.plan.cell import id_knobs
    from calorimeter.plan.vocabulary import ID_ONLY

    assert {"tp_comm_overlap", "pp_schedule", "lora_rank", "label"} <= set(ID_ONLY)
    assert not set(ID_ONLY) & set(CONFIGURATION)
    tp = dataclasses.replace(BASE, pp=1, gpus_per_node=2, sequence_parallel=True, overlap=True)
    pp = dataclasses.replace(BASE, tp=1, pp=4, gpus_per_node=4)
    cells = [dataclasses.replace(tp, tp_comm_overlap="symm_mem", recompute="none"),
             dataclasses.replace(tp, tp_comm_overlap="ring", recompute="full"),
             dataclasses.replace(pp, pp_schedule="dualpipev", recompute="none"),
             dataclasses.replace(pp, recompute="full")]
    runs = pd.DataFrame([{**c.to_dict(), "cell_id": c.cell_id, "status": "ok", "repeat": 0, "iteration_time_s": 1.0}
                         for c in cells])
    cfgs = configs(runs, ("iteration_time_s",))
    assert len(cfgs) == 4
    assert pairs(cfgs, "recompute", lambda v: v == "full", lambda v: v == "none") == []
    assert id_knobs(cells[0].config_id)["tp_comm_overlap"] == "symm_mem"
    assert id_knobs("a-legacy-id") == dict.fromkeys(ID_ONLY)
    same = [dataclasses.replace(c, tp_comm_overlap="symm_mem") for c in cells[:2]]  # one mechanism: one pair
    runs = pd.DataFrame([{**c.to_dict(), "cell_id": c.cell_id, "status": "ok", "repeat": 0, "iteration_time_s": 1.0}
                         for c in same])
    assert len(pairs(configs(runs, ("iteration_time_s",)), "recompute", lambda v: v == "full",
                     lambda v: v == "none")) == 1


def test_one_parameter_value_for_the_findings_pairs_and_compare() -> None:
    """A runs table with a missing value stores its integers as floats; the findings' pairs and ``calorimeter
    compare`` (one normaliser for both) must still match 4.0 with 4 and NaN with None."""
    import numpy as np

    assert param_value(np.float64(4.0)) == 4 and type(param_value(np.float64(4.0))) is int
    assert param_value(float("nan")) is None and param_value(None) is None
    assert param_value(np.bool_(True)) is True and param_value(np.int64(2)) == 2
    assert param_value(2.5) == 2.5 and param_value("symm_mem") == "symm_mem"
    assert len({param_value(4), param_value(4.0), param_value(np.int32(4))}) == 1
