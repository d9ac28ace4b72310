"""Defect classes of the figures reviews, on committed real records: labels name every compared knob, non-training
cells are never drawn as models, 2-3 repetitions are points (not t-intervals), rows that are compared share their
axis, captions list exactly the cells drawn; LoRA drawn and not the hidden "1" of the efficiency scale, machines
and unsteady windows named, link volumes per iteration, configuration means in the scale comparison, and on the
default CPU sweep no axis with a scale where nothing was measured."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from conftest import ROOT
from figure_rules import numeric_axes_without_data
from matplotlib.text import Text

from calorimeter.analysis.tables import add_normalized_efficiency, load_plan_cells, read_tables
from calorimeter.figures import FIGURES, fig13_microbatch, render
from calorimeter.figures.common import collapse_repeats, config_label, interval, training_only
from calorimeter.figures.panels import normalized_efficiency
from calorimeter.figures.selection import figure_cells
from calorimeter.records.legacy import upgrade_runs
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
    assert any("per-GPU avg. GPU-6e4fcbbf+GPU-84549a26 (6 widest cells)" in t.get_text() for ax in fig.axes
               for t in ax.get_yticklabels())  # one average row per machine (its GPUs by UUID)
    plt.close(fig)
    fig, _ = _draw("fig05_links", REF / "h200x8-2026-11-21" / "h200x8-parallelism")
    im = fig.axes[0].get_images()[0]
    lowest = im.cmap(im.norm(np.nanmin(im.get_array())))
    assert sum(lowest[:3]) < 2.8  # visibly coloured (white is 3.0)
    plt.close(fig)


def test_throughput_of_a_sweep_without_training_cells_draws_nothing_and_says_why(tmp_path: Path) -> None:
    """A collectives sweep has no model groups: the throughput figure is empty (it raised KeyError: 0)."""
    t = _tables(REF / "h200x2-collectives-2026-11-23" / "h200x2-collectives")
    t["runs"] = upgrade_runs(t["runs"])
    res = render("throughput", {k: t[k] for k in FIGURES["throughput"].TABLES}, tmp_path / "t.png", tmp_path / "t.pdf")
    assert res.n_points == 0 and any("non-training" in m for m in res.missing), res.missing


# ---- the 2026-11-27 figures review (T4-2 .. T4-16) and what `make run` shows on CPU ----

STEADY2 = REF / "findings-steady-2026-11-26" / "h200x2-findings-steady"  # 27 cells, two machines, 12 windows not steady
STEADY1 = REF / "findings-steady-2026-11-25" / "h100x1-findings-steady"  # 4 x 3 + 3 LoRA cells, two hosts
CPU = ROOT / "tests" / "fixtures" / "cpu-default"  # the default sweep on CPU ranks


def _render(name: str, sweep: Path, tmp_path: Path) -> tuple[plt.Figure, object]:
    """Draw a figure as the workflow does (render: training cells, machines, what the data cannot draw) and keep the
    figure open for inspection."""
    import calorimeter.figures as figures

    t = _tables(sweep)
    t["runs"] = upgrade_runs(t["runs"])
    kept: list[plt.Figure] = []
    real_save = figures.save
    figures.save = lambda fig, png, pdf=None: kept.append(fig)
    try:
        res = render(name, {k: t[k] for k in (*FIGURES[name].TABLES, "configs") if k in t}, tmp_path / f"{name}.png")
    finally:
        figures.save = real_save
    return kept[0], res


def _by_gid(fig: plt.Figure, prefix: str) -> list:
    return [a for ax in fig.axes for a in [*ax.lines, *ax.patches, *ax.collections]
            if str(a.get_gid() or "").startswith(prefix)]


def test_lora_cells_are_drawn_and_the_efficiency_scale_tops_at_a_drawn_configuration(tmp_path: Path) -> None:
    """T4-2: LoRA was dropped from every figure yet was the "1" of the normalised efficiency (0.55 at most drawn)."""
    fig, res = _render("fig08_optimization", STEADY1, tmp_path)
    assert any(c.endswith("_lora-r16") for c in res.cells)
    assert "T1-P1 LoRA" in {t.get_text() for t in fig.findobj(Text)}  # its own configuration, named
    means = np.concatenate([ln.get_ydata() for ln in _by_gid(fig, "efficiency")])
    assert np.nanmax(means) == pytest.approx(1.0)  # the best drawn configuration's mean, not a cell left out
    fig, _ = _render("data_quality", STEADY1, tmp_path)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(set(labels)) == len(labels) and any("LoRA" in lab for lab in labels)  # never twice the same label


def test_the_runs_table_and_the_figures_normalise_efficiency_by_one_definition() -> None:
    """The runs table's efficiency_norm is over the sweep's best configuration mean (never one repetition), Fig. 13's
    over the best configuration it draws: the same function over the drawn cells (it leaves out the sweep's best,
    TP1-PP1-DP2 with overlap, so its values are higher by the ratio of the two means)."""
    t = _tables(FINDINGS)
    ok = t["runs"][t["runs"]["status"] == "ok"]
    per_config = ok.groupby("config_id")["efficiency_norm"].mean()
    assert per_config.max() == pytest.approx(1.0) and ok["efficiency_norm"].max() > 1.0  # a repetition above its mean
    drawn = normalized_efficiency(fig13_microbatch.select(collapse_repeats(t))).set_index("config_id")
    assert drawn["efficiency_norm"].max() == pytest.approx(1.0)
    cells = figure_cells("fig13_microbatch", t["runs"].to_dict("records"))
    again = add_normalized_efficiency(t["runs"][t["runs"]["cell_id"].isin(cells)])
    assert again.groupby("config_id")["efficiency_norm"].mean()[drawn.index].to_numpy() == pytest.approx(
        drawn["efficiency_norm"].to_numpy())
    ratio = drawn["efficiency_norm"] / per_config[drawn.index]
    assert ratio.min() == pytest.approx(ratio.max()) and ratio.min() > 1.0


def test_two_machines_and_unsteady_windows_are_named(tmp_path: Path) -> None:
    """T4-3: two machines drawn as one node 0 with one per-GPU average; the windows that were not steady unmarked
    (12 of 27 drifted by 1 degC or more), and data_quality said "nothing to report"."""
    fig, res = _render("fig17_temperature", STEADY2, tmp_path)
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert sum(r.startswith("per-GPU avg. GPU-") for r in rows) == 2  # one average row per machine
    assert all("@GPU-" in r for r in rows if not r.startswith("per-GPU avg."))
    assert any(r.endswith("†") for r in rows) and any("not thermally steady" in m for m in res.missing)
    fig, res = _render("fig04_parallelism", STEADY2, tmp_path)
    assert _by_gid(fig, "unsteady") and any("machine:" in d for d in res.differs)
    fig, res = _render("data_quality", STEADY2, tmp_path)
    notes = next(t.get_text() for t in fig.axes[1].texts if t.get_gid() == "notes")
    assert "12 of 27 measured cells (v): measured window not thermally steady" in notes
    assert "machines: GPU-d304091b+GPU-de4479a4 (16 cells), GPU-244893c0+" in notes


def test_link_volumes_are_per_iteration(tmp_path: Path) -> None:
    """T4-4: three repetitions of one configuration read 555 / 481 / 518 GB over 15 / 13 / 14 measured steps."""
    fig, _ = _render("fig05_links", STEADY2, tmp_path)
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    data = ax.get_images()[0].get_array()
    tp = [i for i, r in enumerate(rows) if "T2+SP-P1" in r]
    assert len(tp) == 3
    per_rep = data[tp, 0]
    assert float(per_rep.max() / per_rep.min()) < 1.02  # the same volume per iteration (was 1.15 apart)
    assert 15 < float(per_rep.mean()) < 25  # GB per GPU and iteration (37 GB both GPUs), not per window


def test_scale_compare_bars_are_configuration_means_in_distinct_colours(tmp_path: Path) -> None:
    """T4-5: the bar was the best single repetition (30,842 tokens/s/GPU for a 29,012 mean) labelled "T1-P1 r1"; two
    systems shared one colour."""
    fig, res = _render("scale_compare", STEADY2, tmp_path)
    per_gpu = fig.axes[1]
    bar = next(p for p in per_gpu.patches if str(p.get_gid()).startswith("bar:"))
    runs = upgrade_runs(_tables(STEADY2)["runs"])
    means = runs[runs["status"] == "ok"].groupby("config_id")["tokens_per_s_per_gpu"].mean()
    assert bar.get_height() == pytest.approx(means.max()) and bar.get_height() < runs["tokens_per_s_per_gpu"].max()
    assert not any(" r1" in t.get_text() or " r2" in t.get_text() for t in fig.axes[0].texts)
    fig, _ = _render("scale_compare", CPU, tmp_path)
    colours = {p.get_gid(): p.get_facecolor() for p in fig.axes[0].patches if str(p.get_gid()).startswith("bar:")}
    assert len(colours) == 2 and len(set(colours.values())) == 2  # cpu 1x1 and cpu 1x2 apart
    assert fig.axes[1].get_ylabel() == "tokens/s per rank"


def test_lines_join_only_cells_that_differ_in_the_compared_knob(tmp_path: Path) -> None:
    """T4-7: Fig. 4 joined TP2+SP without recompute to ZeRO-3 and PP2 with it, and three placement policies."""
    for sweep in (STEADY2, PLACEMENT):
        fig, _ = _render("fig04_parallelism", sweep, tmp_path)
        assert all(len(ln.get_xdata()) == 1 for ln in _by_gid(fig, "avg")), sweep.name


def test_placement_draws_repetitions_as_points_and_is_left_out_where_nothing_compares(tmp_path: Path) -> None:
    """T4-8 and the empty placement figure of every other report."""
    fig, res = _render("placement", PLACEMENT, tmp_path)
    assert _by_gid(fig, "reps") and not _by_gid(fig, "ci95")  # 3 repetitions: points, no t-interval
    fig, res = _render("placement", STEADY2, tmp_path)
    assert res.to_dict()["drawn"] is False and "placement policy" in res.not_drawn
    assert not fig.axes  # a sentence, no empty axes


def test_clock_heatmaps_share_a_scale_wider_than_a_clock_step(tmp_path: Path) -> None:
    """T4-9: 1,633-1,648 MHz (0.9%) spanned the whole colour map, the two panels on different scales."""
    fig, _ = _render("fig17_sm_clock", STEADY1, tmp_path)
    norms = {(im.norm.vmin, im.norm.vmax) for ax in fig.axes for im in ax.get_images()}
    assert len(norms) == 1 and np.diff(next(iter(norms)))[0] >= 200


def test_labels_carry_placement_sequence_parallel_and_lora(tmp_path: Path) -> None:
    """T4-10 and the "+SP" labels: three identical "TP1-PP2 Z1 mb1 x2" bars; TP2 without "+SP"."""
    fig, _ = _render("throughput", PLACEMENT, tmp_path)
    ticks = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    assert len(set(ticks)) == len(ticks) and any("pl-thermal" in t for t in ticks)
    fig, _ = _render("throughput", STEADY2, tmp_path)
    assert any(t.get_text().startswith("TP2+SP-PP1") for t in fig.axes[1].get_xticklabels())
    assert "each repetition" in [t.get_text() for lg in fig.legends for t in lg.get_texts()]


def test_throttle_separates_cells_that_all_sit_at_the_power_cap(tmp_path: Path) -> None:
    """T4-11: every cell at 100% sw_power_cap; the "most throttled" cell was a 27-way tie."""
    fig, res = _render("throttle", STEADY2, tmp_path)
    deficit = [p.get_height() for p in _by_gid(fig, "deficit")]
    assert len(deficit) == 27 and max(deficit) - min(deficit) > 100  # MHz below the ceiling: the cells differ
    assert any("same share in every cell" in m for m in res.missing)


def test_kernel_bars_show_their_repetitions(tmp_path: Path) -> None:
    """T4-12: means of 2-3 repetitions without their spread."""
    fig, _ = _render("fig10_kernels", STEADY2, tmp_path)
    reps = _by_gid(fig, "reps")
    assert reps and all(len(ln.get_ydata()) == 3 for ln in reps)  # each bar's three repetitions


def test_panels_keep_markers_apart_and_draw_no_clock_peak(tmp_path: Path) -> None:
    """T4-13: efficiency repetition markers inside the temperature's; a flat boost-clock "peak"."""
    fig, _ = _render("fig04_parallelism", STEADY2, tmp_path)
    temp = {float(x) for ln in _by_gid(fig, "reps:temp_avg_c") for x in ln.get_xdata()}
    eff = {float(x) for ln in _by_gid(fig, "reps:efficiency") for x in ln.get_xdata()}
    assert temp and eff and not temp & eff
    clock = next(ax for ax in fig.axes if (ax.get_gid() or "").startswith("panel:sm_clock_avg_mhz"))
    assert [ln for ln in clock.lines if ln.get_gid() == "min"] and not [ln for ln in clock.lines
                                                                          if ln.get_gid() == "peak"]


def test_engine_speed_set_has_a_figure(tmp_path: Path) -> None:
    """T4-14: `calorimeter rebuild` of the engine-speed set exited 2 ("no sweep here")."""
    from calorimeter.cli import main

    assert main(["rebuild", str(REF / "h200x2-engine-speed-2026-11-23c"), "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "figures" / "engine_speed.json").read_text())
    assert res["n_points"] == 21 and (tmp_path / "figures" / "engine_speed.png").stat().st_size > 20_000


def test_report_pages_name_the_set_machines_repetitions_and_steady_share(tmp_path: Path) -> None:
    """T4-15: the report opened on the workflow graph; captions named neither date, machines, repetitions nor the
    steady share."""
    from calorimeter.figures.report import ReportPages, provenance
    from calorimeter.records.paths import SweepPaths

    text = provenance(SweepPaths.of(STEADY2.parent, STEADY2.name))
    for part in ("set ``findings-steady-2026-11-26``", "measured 2026-11-2",
                 "2 machines (GPU-d304091b+GPU-de4479a4: 16",
                 "9 configurations measured, 3 repetitions each", "15 of 27 measured windows thermally steady"):
        assert part in text, part
    pages = ReportPages(str(STEADY2.parent), STEADY2.name, tuple((n, m.TITLE) for n, m in FIGURES.items()))
    first = pages.first_page()  # no figures drawn in the committed set: provenance and findings only
    assert first.startswith("Sweep ``h200x2-findings-steady``") and "0 agree, 0 partly, 0 disagree, 22 cannot" in first


def test_small_items(tmp_path: Path) -> None:
    """T4-16: "r" meant rank in the timeline legend and repetition in its title; Fig. 15's title "()"."""
    fig, _ = _render("timeline", STEADY1, tmp_path)
    assert all("(rank " in t.get_text() for lg in [fig.axes[0].get_legend()] for t in lg.get_texts())
    assert "not steady" in fig._suptitle.get_text()  # noqa: SLF001 - no H100 window was steady
    fig, _ = _render("fig15_stages", STEADY2, tmp_path)
    assert "()" not in fig._suptitle.get_text()  # noqa: SLF001


def test_cpu_sweep_draws_what_a_cpu_measures_and_no_invented_axis(tmp_path: Path) -> None:
    """`make run` on CPU: 10 of 14 figures were empty panels with numeric axes (negative temperatures and
    efficiencies, zero bars that looked measured). Now every figure either draws measured data or says, without
    axes, what it needs."""
    drawn, skipped = [], {}
    for name in FIGURES:
        fig, res = _render(name, CPU, tmp_path)
        assert numeric_axes_without_data(fig) == [], name
        if res.not_drawn:
            skipped[name] = res.not_drawn
            assert not fig.axes, name
        else:
            drawn.append(name)
    assert {"throughput", "training", "fig10_kernels", "scale_compare"} <= set(drawn)
    assert "needs GPU telemetry" in skipped["fig04_parallelism"] and "placement" in skipped
    fig, res = _render("training", CPU, tmp_path)  # the layouts' equivalence: losses against the single-rank cell
    diffs = [np.abs(ln.get_ydata()).max() for ln in _by_gid(fig, "diff:")]
    assert len(diffs) == 3 and max(diffs) < 1e-4


def test_a_sweep_with_peer_cells_draws_every_figure(tmp_path: Path) -> None:
    """A sweep whose grid holds peers (``kind: command`` cells: no tp, pp or ZeRO stage in their records) beside the
    engine's layouts: every figure is drawn (the committed 4x H100 layouts run)."""
    sweep = REF / "h100x4-layouts-2026-11-28" / "h100x4-layouts-a"
    assert _tables(sweep)["runs"]["tp"].isna().any()  # the peer's row
    for name in FIGURES:
        res = render(name, _tables(sweep), tmp_path / f"{name}.png")
        assert res.name == name and (tmp_path / f"{name}.png").stat().st_size > 10_000
