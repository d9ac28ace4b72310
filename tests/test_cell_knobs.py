"""Engine knobs newer than the records (pipeline schedule, ZeRO buckets): in a cell's id and parameters only when set,
so every cell that does not set them keeps its id, its parameters and its rerun trigger."""

from __future__ import annotations

from pathlib import Path

from calorimeter.plan.cell import Cell
from calorimeter.plan.plan import plan_file

BASE = dict(sweep="s", model="llama3-8b-8l", hardware="h100", nodes=1, gpus_per_node=4, seq_len=8192,
            global_batch=32, precision="bf16")


def test_unset_knobs_leave_ids_and_parameters_as_they_were() -> None:
    plain = Cell(**BASE, pp=4)
    assert plain.cell_id == "llama3-8b-8l_h100-1x4_tp1-pp4-dp1_z1_rc-none_ov-off_mb1-gb32-s8192"
    d = plain.to_dict()
    assert not {"pp_schedule", "bucket_elements", "prefetch_elements"} & set(d)
    assert Cell.from_dict(d) == plain
    knobs = Cell(**BASE, pp=4, pp_schedule="dualpipev")
    assert knobs.cell_id == "llama3-8b-8l_h100-1x4_tp1-pp4-dp1-dualpipev_z1_rc-none_ov-off_mb1-gb32-s8192"
    z3 = Cell(**BASE, zero_stage=3, bucket_elements=200_000_000, prefetch_elements=25_000_000)
    assert "_z3-bk2e8-pf25e6_" in z3.cell_id
    assert Cell.from_dict(z3.to_dict()) == z3


def test_a_sweep_sets_the_knobs_and_1f1b_is_the_default(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("sweep: s\nhardware: h100\nmemory_check: false\n"
                 "defaults: {model: llama3-8b-8l, gpus_per_node: 4, seq_len: 8192, global_batch: 32}\ngrid:\n"
                 "  - {parallel: {pp: 4}, pp_schedule: [1f1b, dualpipev]}\n"
                 "  - {zero_stage: 3, prefetch_elements: [0, 100000000], bucket_elements: 200000000}\n"
                 "  - {pp: 4, pp_schedule: dualpipev, global_batch: 4}\n")
    cells = {pc.cell.cell_id: pc for pc in plan_file(f).cells}
    pp = [c for c in cells if "pp4" in c and "gb32" in c]
    assert sorted(pp) == ["llama3-8b-8l_h100-1x4_tp1-pp4-dp1-dualpipev_z1_rc-none_ov-off_mb1-gb32-s8192",
                          "llama3-8b-8l_h100-1x4_tp1-pp4-dp1_z1_rc-none_ov-off_mb1-gb32-s8192"]
    assert sum("_z3-bk2e8-pf" in c for c in cells) == 2
    small = next(pc for c, pc in cells.items() if "gb4" in c)
    assert small.status == "pruned" and "DualPipeV needs at least 2 pp = 8 micro-batches" in " ".join(small.reasons)


def test_tp_overlap_knob_in_the_id_only_when_set_and_needs_overlapped_sp(tmp_path: Path) -> None:
    """``tp_comm_overlap`` picks the tensor-parallel overlap mechanism of one cell (``ov-on-tp<symm|ring|none>``); the
    engine and the projection take it; without overlap, tp > 1 and SP it has nothing to choose: pruned, saying so."""
    from calorimeter.plan.cell import parse_cell_id
    from calorimeter.projection.model import tp_overlap_mechanism
    from calorimeter.train.engine import tp_config

    auto = Cell(**BASE, tp=4, sequence_parallel=True, overlap=True)
    assert auto.cell_id.endswith("_ov-on_mb1-gb32-s8192") and "tp_comm_overlap" not in auto.to_dict()
    for mode, token in (("symm_mem", "symm"), ("ring", "ring"), ("none", "none")):
        c = Cell(**BASE, tp=4, sequence_parallel=True, overlap=True, tp_comm_overlap=mode)
        assert f"_ov-on-tp{token}_" in c.cell_id
        assert parse_cell_id(c.cell_id).tp_comm_overlap == mode and Cell.from_dict(c.to_dict()) == c
        assert tp_overlap_mechanism(c) == mode
        assert tp_config(c).overlap == (mode != "none")  # none: whole TP collectives, DeepSpeed's overlap stays on
    assert tp_overlap_mechanism(auto) == "symm_mem"
    f = tmp_path / "s.yaml"
    f.write_text("sweep: s\nhardware: h100\nmemory_check: false\n"
                 "defaults: {model: llama3-8b-8l, gpus_per_node: 4, seq_len: 8192, global_batch: 32}\ngrid:\n"
                 "  - {parallel: {tp: 4, sequence_parallel: true}, overlap: [true, false], tp_comm_overlap: ring}\n")
    cells = {pc.cell.overlap: pc for pc in plan_file(f).cells}
    assert cells[True].status == "planned"
    assert cells[False].status == "pruned" and "needs overlap on" in " ".join(cells[False].reasons)


def test_the_engine_takes_a_cells_tp_overlap_and_only_that_cells() -> None:
    import pytest

    from calorimeter.train.engine import tp_config
    from calorimeter.train.tp_overlap import tp_overlap_mode

    cell = Cell(**BASE, tp=4, sequence_parallel=True, overlap=True, tp_comm_overlap="symm_mem")
    assert tp_overlap_mode(tp_config(cell).mechanism) == "symm_mem"
    with pytest.raises(ValueError, match="tp_comm_overlap 'nccl'"):
        tp_overlap_mode("nccl")
    assert tp_overlap_mode() == "ring"  # auto before Megatron's groups exist
