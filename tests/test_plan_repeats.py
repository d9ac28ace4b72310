"""Repetitions and measurement-length settings in the plan: ids, interleaved order, schema."""

from __future__ import annotations

import pytest

from calorimeter.plan import ConfigError, make_plan
from calorimeter.plan.cell import Cell

CPU = {"sweep": "t", "hardware": "cpu", "defaults": {"global_batch": 8, "micro_batch": 2}}


def test_repetitions_are_cells_with_suffixed_ids_interleaved_in_time() -> None:
    plan = make_plan({**CPU, "grid": [{"model": ["tiny-gpt", "tiny-llama"], "repeats": 3},
                                      {"model": "tiny-gpt", "zero_stage": 0, "gpus_per_node": 1}]})
    ids = [pc.cell.cell_id for pc in plan.cells]
    first = ids[:3]
    assert not any(i.endswith(("_r1", "_r2")) for i in first)  # every configuration's first run first
    assert [i[-3:] for i in ids[3:]] == ["_r1", "_r1", "_r2", "_r2"]
    cells = {pc.cell.cell_id: pc.cell for pc in plan.cells}
    r2 = next(c for i, c in cells.items() if i.endswith("_r2"))
    assert r2.config_id == r2.cell_id[: -len("_r2")] and r2.config_id in cells and cells[r2.config_id].repeat == 0
    d = r2.to_dict()
    assert d["repeat"] == 2 and d["config_id"] == r2.config_id and Cell.from_dict(d) == r2
    # the first run keeps the id it had before repetitions existed
    assert Cell(sweep="t", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=2).cell_id == \
        Cell(sweep="t", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=2, repeat=0).config_id


def test_measurement_settings_reach_the_cell_and_are_validated() -> None:
    plan = make_plan({**CPU, "defaults": {**CPU["defaults"], "warmup": "fixed", "measured_min_s": 0},
                      "grid": [{"model": "tiny-gpt", "steady_slope_c_per_min": 0.5},
                               {"model": "tiny-llama", "warmup": "steady", "warmup_max_s": 60}]})
    gpt, llama = (pc.cell for pc in plan.cells)
    assert (gpt.warmup, gpt.steady_slope_c_per_min, gpt.measured_min_s) == ("fixed", 0.5, 0)
    # the slope cap is optional (the drift rule alone by default), the fit 30 s
    assert (llama.warmup, llama.warmup_max_s, llama.steady_slope_c_per_min, llama.steady_window_s) == (
        "steady", 60, None, 30.0)
    # run lengths are not part of the id: the same configuration with another warm-up is the same cell
    with pytest.raises(ConfigError, match="share the id"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "warmup": ["steady", "fixed"]}]})
    with pytest.raises(ConfigError, match="warmup"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "warmup": "sometimes"}]})
    with pytest.raises(ConfigError, match="repeats"):
        make_plan({**CPU, "grid": [{"model": "tiny-gpt", "repeats": 0}]})


def test_each_repetition_runs_in_its_own_seeded_shuffled_order() -> None:
    cfg = {**CPU, "grid": [{"model": "tiny-gpt", "micro_batch": [1, 2, 4, 8], "global_batch": 16, "repeats": 3}]}
    ids = [pc.cell.cell_id for pc in make_plan(cfg).cells]
    passes = [[i.rsplit("_r", 1)[0] if k else i for i in ids[4 * k:4 * k + 4]] for k in range(3)]
    assert not any(i.endswith(("_r1", "_r2")) for i in ids[:4]) and all(i.endswith("_r1") for i in ids[4:8])
    assert all(i.endswith("_r2") for i in ids[8:])  # repetitions interleaved in time
    assert all(sorted(p) == sorted(passes[0]) for p in passes)  # every pass runs every configuration once
    assert len({tuple(p) for p in passes}) > 1  # ... in its own order
    assert ids == [pc.cell.cell_id for pc in make_plan(cfg).cells]  # seeded: the same sweep, the same order
