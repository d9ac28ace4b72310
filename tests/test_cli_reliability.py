"""The command line on damaged records (named, never silent; nothing to draw exits non-zero) and on cells that can
never finish within the launcher's time limit (pruned by `plan`, with the estimate)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from calorimeter.cli import main
from calorimeter.plan.plan import plan_file
from calorimeter.plan.time_limit import CPU_FLOPS_BOUND, min_run_time_s

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference" / "h200x2-2026-11-21"


@pytest.fixture
def shipped(tmp_path: Path) -> tuple[Path, Path]:
    """(sweep file, cells folder) of a copy of the shipped 2x H200 Llama-3 8B records."""
    data = tmp_path / "ref"
    shutil.copytree(REFERENCE / "gpu-llama8b" / "cells", data / "gpu-llama8b" / "cells",
                    ignore=shutil.ignore_patterns("attempts", "latest"))
    text = (ROOT / "config" / "reference" / "h200x2-llama8b.yaml").read_text()
    sweep = tmp_path / "s.yaml"
    sweep.write_text(text.replace("extends: base.yaml", f"extends: {ROOT / 'config' / 'reference' / 'base.yaml'}")
                     + f"\nresults_dir: {data}\n")
    return sweep, data / "gpu-llama8b" / "cells"


def test_aggregate_and_figure_name_each_damaged_record_and_refuse_to_draw_nothing(
        shipped: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    sweep, cells = shipped
    a, b, c = sorted(cells.iterdir())
    (a / "run.json").write_text((a / "run.json").read_text()[:300])  # truncated
    (b / "steps.parquet").write_bytes(b"PAR1 garbage")
    assert main(["aggregate", str(sweep)]) == 0
    err = capsys.readouterr().err
    assert f"damaged record: {a.name}/run.json: not JSON" in err
    assert f"damaged record: {b.name}/steps.parquet: not a Parquet file; left out" in err
    assert main(["figure", str(sweep)]) == 0
    out, err = capsys.readouterr()
    assert f"damaged record: {a.name}: run.json: not JSON" in err and f"damaged record: {b.name}: " in err
    assert "3 cells drawn (2 measured)" in out
    for d in (b, c):
        (d / "run.json").write_text('["the wrong shape"]')
    assert main(["aggregate", str(sweep)]) == 1
    err = capsys.readouterr().err
    assert "not a cell record" in err and "error: nothing to draw: no cell of sweep gpu-llama8b has a measurement " \
        "(3 corrupt)" in err
    figures = sweep.parent / "ref" / "gpu-llama8b" / "figures"
    shutil.rmtree(figures, ignore_errors=True)
    assert main(["figure", str(sweep)]) == 1
    err = capsys.readouterr().err
    assert err.count("damaged record:") == 3 and "nothing to draw" in err
    assert not figures.exists()  # nothing drawn


def test_plan_prunes_a_cell_that_cannot_finish_within_the_time_limit(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text("sweep: t\nhardware: cpu\nlauncher: {timeout_min: 30}\ndefaults: {model: tiny-gpt, "
                     "gpus_per_node: 2, micro_batch: 2, seq_len: 128}\ngrid:\n  - global_batch: [8, 1000000000]\n")
    plan = plan_file(sweep)
    small, huge = plan.cells
    assert small.status == "planned" and "min_run_time_s" not in small.estimates
    assert huge.status == "pruned"
    bound = huge.estimates["min_run_time_s"]
    c = huge.cell
    # independently: every step at the CPU bound, the least steps, no start-up
    steps = c.warmup_steps + c.measured_steps + plan.config["telemetry"]["profile_steps"]
    assert bound == pytest.approx(steps * huge.estimates["model_flops_per_iteration"]
                                  / (c.world_size * CPU_FLOPS_BOUND))
    assert bound > 30 * 60 and "more than launcher.timeout_min 30 min" in huge.reasons[-1]
    assert f"{bound / 86400:.3g} days" in huge.reasons[-1]
    # the bound is a lower bound: the small cell's (a few seconds on this machine) is under a tenth of a second
    assert min_run_time_s(small.cell, small.estimates["model_flops_per_iteration"]) < 0.1
