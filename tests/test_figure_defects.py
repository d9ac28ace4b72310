"""Defect classes of the 2026-11-25 figures review, on committed real records (issue 24): labels name every compared
knob, non-training cells are never drawn as models, 2-3 repetitions are points (not t-intervals), rows that are
compared share their axis, and captions list exactly the cells drawn."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from conftest import ROOT

from calorimeter.analysis.tables import load_plan_cells, read_tables
from calorimeter.figures import FIGURES, render
from calorimeter.figures.common import collapse_repeats, config_label, interval, training_only
from calorimeter.figures.selection import figure_cells
from calorimeter.records.paths import TABLE_NAMES

REF = ROOT / "results" / "reference"
PLACEMENT = REF / "h200x2-placement-2026-11-23b" / "h200x2-placement"
FINDINGS = REF / "findings-2026-11-23" / "h200x2-findings"


def _tables(sweep: Path) -> dict:
    return read_tables(sweep / "tables", (*TABLE_NAMES, "configs"))


def _draw(name: str, sweep: Path) -> tuple[plt.Figure, object]:
    t, _ = training_only(_tables(sweep))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FIGURES[name].draw(t)


def test_labels_name_every_compared_knob() -> None:
    """Three placement policies of one layout: three distinct labels, grouped apart (Fig. 10 drew 1 of 9 cells)."""
    runs = _tables(PLACEMENT)["runs"]
    train = runs[runs["kind"] == "train"]
    labels = {config_label(r, short=True) for _, r in train.iterrows() if r["repeat"] == 0}
    assert labels == {"T1-P2", "T1-P2 pl-balanced", "T1-P2 pl-thermal"}
    fig, res = _draw("fig04_parallelism", PLACEMENT)
    ticks = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()]
    assert {"T1-P2", "T1-P2 pl-balanced", "T1-P2 pl-thermal"} <= set(ticks)
    assert any("placement" in t.get_text() for t in fig.texts)  # the "differs" note names the knob
    assert any(d.startswith("llama3-8b placement:") for d in res.to_dict()["differs"])  # and the JSON does too
    plt.close(fig)
    fig, res = _draw("fig10_kernels", PLACEMENT)
    assert len(res.cells) == 9  # every policy and repetition, not the first cell of one merged group
    plt.close(fig)


def test_non_training_cells_are_never_drawn_as_models(tmp_path: Path) -> None:
    t = _tables(PLACEMENT)
    assert (t["runs"]["kind"] == "thermal-calibration").sum() == 1
    for name in ("fig04_parallelism", "throughput", "fig17_temperature", "throttle", "scale_compare"):
        res = render(name, {k: t[k] for k in (*FIGURES[name].TABLES, "configs") if k in t}, tmp_path / f"{name}.png")
        assert "thermal-calibration_h200-1x2" not in res.cells, name
        assert "1 non-training cell not drawn (1 thermal-calibration)" in res.missing, name
    fig, _ = _draw("fig04_parallelism", PLACEMENT)
    assert "-" not in {ax.get_title() for ax in fig.axes}  # no model column titled "-"
    plt.close(fig)
    plan = load_plan_cells(PLACEMENT.parent / "h200x2-placement" / "plan.json")
    assert "thermal-calibration_h200-1x2" not in figure_cells("fig04_parallelism", plan)
    assert "thermal-calibration_h200-1x2" in figure_cells("data_quality", plan)  # its data quality still counts


def test_two_or_three_repetitions_are_points_not_t_intervals() -> None:
    """Two repetitions: no 95% bar (12.7 standard errors, past physical limits), the repetitions as markers; the
    axis stays within what was measured (SM clock below the H200's 1,980 MHz)."""
    t = _tables(FINDINGS)
    df = collapse_repeats(t)
    assert set(df["sm_clock_avg_mhz_n"]) == {1, 2} and interval(df, "sm_clock_avg_mhz") is None
    fig, res = _draw("fig08_optimization", FINDINGS)
    gids = {a.get_gid() for ax in fig.axes for a in [*ax.collections, *ax.lines]}
    assert "avg_ci95" not in gids and "reps:sm_clock_avg_mhz" in gids and "reps:temp_peak_c" in gids
    clock = next(ax for ax in fig.axes if (ax.get_gid() or "").startswith("panel:sm_clock_avg_mhz"))
    assert clock.get_ylim()[1] < 2.1  # GHz: the axis no longer reaches the interval's 2.373
    power = next(ax for ax in fig.axes if (ax.get_gid() or "").startswith("panel:power_avg_w"))
    assert power.get_ylim()[0] > 0
    plt.close(fig)
    # a peak over repetitions is the highest repetition (a value a sensor reported), not a mean or the first one
    runs = t["runs"]
    z1 = runs[runs["config_id"] == "llama3-8b-8l_h200-1x2_tp1-pp1-dp2_z1_rc-none_ov-off_mb1-gb16-s2048"]
    row = df[df["config_id"] == z1["config_id"].iloc[0]].iloc[0]
    assert row["sm_clock_peak_mhz"] == z1["sm_clock_peak_mhz"].max()
    assert row["temp_peak_c"] == z1["temp_peak_c"].max() and float(row["temp_peak_c"]).is_integer()


def test_rows_that_are_compared_share_their_axis() -> None:
    fig, _ = _draw("fig15_stages", FINDINGS)
    mb1, mb4 = (ax for ax in fig.axes if ax.get_title(loc="left").startswith("micro-batch"))
    assert mb1.get_shared_y_axes().joined(mb1, mb4) and mb1.get_ylim() == mb4.get_ylim()
    plt.close(fig)
    # two models: one column each, its own time axis (Mixtral's 0.1-0.4 s are not drawn on Llama's 3 s axis)
    fig, _ = _draw("fig15_stages", REF / "h200x4-2026-11-21" / "h200x4-parallelism")
    llama, mixtral = (ax for ax in fig.axes if ax.get_title() in ("llama3-8b", "mixtral-8x7b-4l"))
    assert mixtral.get_ylim()[1] < 0.25 * llama.get_ylim()[1]
    plt.close(fig)


@pytest.mark.parametrize(("sweep", "names"), [(FINDINGS, list(FIGURES)), (PLACEMENT, ["placement", "fig10_kernels"])],
                         ids=["findings", "placement"])
def test_captions_list_exactly_the_cells_drawn(sweep: Path, names: list[str], tmp_path: Path) -> None:
    """Fig. 10 named 17 cells and drew 12, the timeline named 23 and drew 1, placement named cells it never drew."""
    t = _tables(sweep)
    plan = load_plan_cells(sweep / "plan.json")
    for name in names:
        module = FIGURES[name]
        res = render(name, {k: t[k] for k in (*module.TABLES, "configs") if k in t}, tmp_path / f"{name}.png")
        caption = figure_cells(name, plan)
        if getattr(module, "PICKED_AT_RENDER", False):
            assert caption == [] and len(res.cells) == 1, name  # the caption says the figure names its cell
        else:
            assert sorted(caption) == sorted(res.cells), name


def test_intervals_drawn_from_four_repetitions() -> None:
    df = collapse_repeats(_tables(PLACEMENT))  # 3 repetitions: points
    assert interval(df, "tokens_per_s_per_gpu") is None
    df = df.assign(tokens_per_s_per_gpu_n=4)
    err = interval(df, "tokens_per_s_per_gpu")
    assert err is not None and np.isfinite(err).all() and (err.sum(axis=0) > 0).any()


def test_heatmap_scales_keep_states_apart_and_average_like_cells() -> None:
    """Temperature panels share one scale of at least 10 degC; the smallest NVLink volume is coloured, not white
    like a measured zero or an unused GPU; the per-GPU average row averages the cells that use every GPU only."""
    fig, _ = _draw("fig17_temperature", FINDINGS)
    ims = [ax.get_images()[0] for ax in fig.axes if ax.get_images()]
    lims = {im.norm.vmin for im in ims}, {im.norm.vmax for im in ims}
    assert len(lims[0]) == len(lims[1]) == 1 and max(lims[1]) - min(lims[0]) >= 10
    assert any("per-GPU avg. (6 widest cells)" in t.get_text() for ax in fig.axes for t in ax.get_yticklabels())
    plt.close(fig)
    fig, _ = _draw("fig05_links", REF / "h200x8-2026-11-21" / "h200x8-parallelism")
    im = fig.axes[0].get_images()[0]
    lowest = im.cmap(im.norm(np.nanmin(im.get_array())))
    assert sum(lowest[:3]) < 2.8  # visibly coloured (white is 3.0)
    plt.close(fig)


def test_throughput_of_a_sweep_without_training_cells_draws_nothing_and_says_why(tmp_path: Path) -> None:
    """A collectives sweep has no model groups: the throughput figure is empty (it raised KeyError: 0)."""
    from calorimeter.records.legacy import upgrade_runs

    t = _tables(REF / "h200x2-collectives-2026-11-23" / "h200x2-collectives")
    t["runs"] = upgrade_runs(t["runs"])
    res = render("throughput", {k: t[k] for k in FIGURES["throughput"].TABLES}, tmp_path / "t.png", tmp_path / "t.pdf")
    assert res.n_points == 0 and any("non-training" in m for m in res.missing), res.missing
