"""Repetitions in the figures: one point per configuration (the mean) with its 95% interval, every repetition named;
the data-quality figure lists the poor cells."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "analysis"))
import builders  # noqa: E402

from calorimeter.analysis.cell import cell_tables  # noqa: E402
from calorimeter.analysis.repeats import configs_table  # noqa: E402
from calorimeter.analysis.tables import runs_table  # noqa: E402
from calorimeter.figures import data_quality, fig04_parallelism, throughput  # noqa: E402
from calorimeter.figures.common import CUT_NOTE, config_label  # noqa: E402


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    """Four repetitions of the golden cell (iteration 1.0, 1.1, 0.9, 1.05 s: enough for a drawn t-interval) and one
    other configuration, whose GPU 1 energy counter was reset during the measured phase."""
    root = tmp_path_factory.mktemp("repeats")
    cells, rows, gpus = [], [], []
    base = builders.cell_dict()
    for rep, it in enumerate((1.0, 1.1, 0.9, 1.05)):
        cid = base["cell_id"] + (f"_r{rep}" if rep else "")
        c = {**base, "cell_id": cid, "config_id": base["cell_id"], "repeat": rep}
        cells.append(c)
        d = builders.write_cell(root, c)
        (d / "run.json").write_text(json.dumps(builders.record(c, "ok", iteration_time_s=it)))
    other = builders.cell_dict(parallel_label="TP1-PP1-DP2", pp=1, dp=2, cell_id="golden-b")
    cells.append(other)
    d = builders.write_cell(root, other)
    tel = pd.read_parquet(d / "telemetry.parquet")
    g1 = (tel["gpu_index"] == 1) & (tel["time_s"] >= 2.0)
    tel["energy_millijoule_raw"] = tel["energy_millijoule_raw"].where(~g1, tel["energy_millijoule_raw"] - 300_000)
    tel.to_parquet(d / "telemetry.parquet", index=False)
    for c in cells:
        t = cell_tables(root / c["cell_id"])
        rows.append(t.runs)
        gpus.append(t.gpus)
    runs = runs_table([{**c, "status": "planned"} for c in cells], pd.concat(rows, ignore_index=True))
    return {"runs": runs, "gpus": pd.concat(gpus, ignore_index=True), "configs": configs_table(runs)}


def test_throughput_draws_the_mean_and_interval_of_repetitions(tables) -> None:
    fig, res = throughput.draw(tables)
    assert res.n_points == 2 and len(res.cells) == 5  # two configurations, every repetition named
    heights = sorted(p.get_height() for p in fig.axes[0].patches if p.get_height() > 0)
    golden = tables["configs"].set_index("config_id").loc[builders.cell_dict()["cell_id"]]
    assert golden["n_repeats"] == 4
    assert golden["tokens_per_s_per_gpu_mean"] == pytest.approx(heights[0]) or \
        golden["tokens_per_s_per_gpu_mean"] == pytest.approx(heights[1])
    errs = [c for c in fig.axes[0].collections if c.get_gid() == "ci95"]
    segments = [s for c in errs for s in c.get_segments()]
    spans = sorted(abs(s[1][1] - s[0][1]) for s in segments)
    lo, hi = golden["tokens_per_s_per_gpu_ci95_low"], golden["tokens_per_s_per_gpu_ci95_high"]
    assert spans[-1] == pytest.approx(hi - lo)  # the repeated configuration's interval, drawn
    plt.close(fig)


def test_panels_draw_intervals_and_data_quality_lists_the_reset(tables) -> None:
    fig, res = fig04_parallelism.draw(tables)
    assert res.n_points == 2 and any(c.get_gid() == "avg_ci95" for ax in fig.axes for c in ax.collections)
    plt.close(fig)
    fig, res = data_quality.draw(tables)
    notes = next(t for t in fig.axes[1].texts if t.get_gid() == "notes").get_text()
    assert "[poor] golden-b" in notes and "1 reset(s)" in notes
    assert res.missing == ["1 cells with poor data"]
    plt.close(fig)


def test_long_intervals_are_cut_at_axes_that_fit_the_points(tables) -> None:
    """Two repetitions give t-intervals of 12.7 standard errors: the axes keep fitting the points (never negative
    throughput or power), the interval is cut there, and the figure says so."""
    cfg = tables["configs"].copy()
    golden = cfg["config_id"] == builders.cell_dict()["cell_id"]
    for m, spread in (("tokens_per_s_per_gpu", 1e9), ("power_avg_w", 1e5), ("temp_avg_c", 1e3)):
        cfg.loc[golden, f"{m}_ci95_low"] = cfg.loc[golden, f"{m}_mean"] - spread
        cfg.loc[golden, f"{m}_ci95_high"] = cfg.loc[golden, f"{m}_mean"] + spread
    wide = {**tables, "configs": cfg}
    fig, res = throughput.draw(wide)
    lo, hi = fig.axes[0].get_ylim()
    assert lo == 0 and hi < 5 * cfg["tokens_per_s_per_gpu_mean"].max() and CUT_NOTE in res.missing
    plt.close(fig)
    fig, res = fig04_parallelism.draw(wide)
    power = next(ax for ax in fig.axes if ax.get_gid() == f"panel:power_avg_w:{cfg['model'].iloc[0]}")
    assert power.get_ylim()[0] >= 0 and power.get_ylim()[1] < 1e4 and CUT_NOTE in res.missing
    plt.close(fig)
    fig, res = fig04_parallelism.draw(tables)  # the fixture's own intervals fit: nothing cut, nothing said
    assert CUT_NOTE not in res.missing
    plt.close(fig)


def test_repetitions_drawn_one_by_one_are_labelled_apart() -> None:
    r = {"parallel_label": "TP1-PP1-DP2", "zero_stage": 3, "dp": 2}
    assert config_label({**r, "repeat": 0}, short=True) == config_label(r, short=True) == "T1-P1-D2"
    assert config_label({**r, "repeat": 1}, short=True) == "T1-P1-D2 r1"
