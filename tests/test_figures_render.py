"""Every figure renders from fixture tables: expected points, labels from cell parameters, status bands, notes on
missing data, deterministic files."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import SWEEPS

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "analysis"))
import builders  # noqa: E402
from synthetic import synthetic_tables  # noqa: E402

from calorimeter.analysis.cell import cell_tables  # noqa: E402
from calorimeter.analysis.tables import runs_table  # noqa: E402
from calorimeter.figures import (  # noqa: E402
    FIGURES,
    fig04_parallelism,
    fig05_links,
    fig08_optimization,
    fig10_kernels,
    fig13_microbatch,
    fig15_stages,
    fig17_sm_clock,
    fig17_temperature,
    render,
    scale_compare,
    throttle,
    timeline,
)
from calorimeter.plan.plan import plan_file  # noqa: E402


@pytest.fixture(scope="module")
def opt() -> dict[str, pd.DataFrame]:
    return synthetic_tables([pc.to_dict() for pc in plan_file(SWEEPS / "h200-optimization.yaml").cells],
                            run_pruned=True)


@pytest.fixture(scope="module")
def mbs() -> dict[str, pd.DataFrame]:
    return synthetic_tables([pc.to_dict() for pc in plan_file(SWEEPS / "h200-microbatch.yaml").cells],
                            run_pruned=True)


def _points(ax: plt.Axes, gid: str) -> int:
    return sum(int(np.isfinite(np.asarray(line.get_ydata(), dtype=float)).sum()) for line in ax.get_lines()
               if line.get_gid() == gid)


def _bands(fig: plt.Figure, status: str | None = None) -> int:
    return sum(1 for ax in fig.axes for p in ax.patches + ax.collections
               if (p.get_gid() or "").startswith("band:" + (status or "")))


def _panels(fig: plt.Figure, kind: str = "panel") -> dict[str, list[plt.Axes]]:
    """Panel axes by model (temperature, power, clock rows), from their gids."""
    out: dict[str, list[plt.Axes]] = {}
    for ax in fig.axes:
        gid = ax.get_gid() or ""
        if gid.startswith(kind + ":"):
            out.setdefault(gid.split(":", 2)[2], []).append(ax)
    return out


def _ticks(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def test_fig4_one_point_per_configuration_with_labels_and_bands(opt) -> None:
    fig, res = fig04_parallelism.draw(opt)
    runs = opt["runs"].set_index("cell_id").loc[res.cells]
    panels = _panels(fig)
    assert list(panels) == ["gpt3-175b", "llama3-70b", "mixtral-8x7b", "mixtral-8x22b"]  # one column per model
    labels = [t for model in panels for t in _ticks(panels[model][2])]
    assert res.n_points == 15 == len(labels)  # 13 model-parallel + 2 FSDP configurations
    assert set(runs["optimization_label"]) == {"act"}
    assert labels[0] == "T8-FSDP" and "E8-T1-P1-D32" in labels and "E4-T2+SP-P1-D16" in labels  # never swapped
    for model, axes in panels.items():
        ok = int((runs[runs["model"] == model]["status"] == "ok").sum())
        for ax in axes:  # the clock panel's extreme is its minimum (its peak is the idle boost clock)
            extreme = "min" if ax is axes[2] else "peak"
            assert _points(ax, "avg") == ok and _points(ax, extreme) == ok
    assert _bands(fig) == 3 * int((runs["status"] != "ok").sum())  # every panel
    assert _bands(fig, "oom") > 0 and "oom" in " ".join(res.missing)
    # every model its own efficiency axis, from zero to its own best
    eff = _panels(fig, "efficiency")
    tops = {m: axes[0].get_ylim()[1] for m, axes in eff.items()}
    assert all(axes[0].get_ylim()[0] == 0 for axes in eff.values()) and len(set(tops.values())) == len(tops)
    plt.close(fig)


def test_fig8_and_fig13_variants(opt, mbs) -> None:
    fig, res = fig08_optimization.draw(opt)
    assert res.n_points == 60
    first = _panels(fig)["gpt3-175b"][2]
    assert _ticks(first)[:4] == ["base", "cc", "act", "cc+act"]
    ys = np.concatenate([line.get_ydata() for axes in _panels(fig, "efficiency").values() for ax in axes
                         for line in ax.get_lines()]).astype(float)
    assert np.nanmax(ys) == pytest.approx(1.0)
    plt.close(fig)
    fig, res = fig13_microbatch.draw(mbs)
    assert res.n_points == 60
    assert _ticks(_panels(fig)["gpt3-175b"][2])[:4] == ["1", "2", "4", "8"]
    plt.close(fig)


def test_fig10_pairs_and_fig15_stage_order(opt, mbs) -> None:
    fig, res = fig10_kernels.draw(opt)
    panels = [a for a in fig.axes if a.get_title()]  # one panel per model, each with its own time axis
    assert [a.get_title() for a in panels] == list(dict.fromkeys(opt["runs"]["model"]))
    labels = [t.get_text() for ax in panels for t in ax.get_xticklabels()]
    assert len(labels) == 60  # 15 configurations x overlap off/on x (without, with recomputation)
    assert labels[:4] == ["base", "act", "cc", "cc+act"]  # pairs with overlap on are drawn too
    assert res.n_points == int((opt["runs"].set_index("cell_id").loc[res.cells, "status"] == "ok").sum())
    assert any(c.get_gid() == "busy" for ax in panels for c in ax.collections)
    plt.close(fig)
    fig, res = fig15_stages.draw(mbs, model="gpt3-175b")
    top, bottom = fig.axes[:2]
    ticks = [t.get_text() for t in top.get_xticklabels()]
    assert ticks[:1] == ["0"] and ticks[1:5] == ["0", "1", "2", "3"]  # FSDP (1 stage), then TP8-PP4 stages 0..3
    assert "31" in ticks and ticks.index("10") > ticks.index("9")  # numeric, never lexicographic
    plt.close(fig)
    only1 = mbs["runs"][mbs["runs"]["micro_batch"] == 1]
    fig, res = fig15_stages.draw({**mbs, "runs": only1})
    assert "micro-batch 4 cells" in res.missing
    plt.close(fig)


def test_heatmaps_have_rows_columns_and_node_lines(opt) -> None:
    for module in (fig05_links, fig17_temperature, fig17_sm_clock):
        fig, res = module.draw(opt)
        ax = fig.axes[0]
        im = ax.get_images()[0]
        rows = res.n_points + (1 if "fig17" in res.name else 0)
        assert im.get_array().shape == (rows, 32)
        assert sum(1 for line in ax.get_lines() if line.get_xdata()[0] in (7.5, 15.5, 23.5)) == 3
        assert set(opt["runs"].set_index("cell_id").loc[res.cells, "optimization_label"]) == {"base"}
        plt.close(fig)


def test_scale_timeline_throttle(opt) -> None:
    h100 = synthetic_tables([pc.to_dict() for pc in plan_file(SWEEPS / "h100-optimization.yaml").cells],
                            run_pruned=True)
    both = pd.concat([opt["runs"], h100["runs"]], ignore_index=True)
    fig, res = scale_compare.draw({"runs": both})
    assert res.n_points == 8 and [t.get_text() for t in fig.axes[-1].get_xticklabels()] == [
        "gpt3-175b", "llama3-70b", "mixtral-8x7b", "mixtral-8x22b"]
    systems = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert systems == ["h200-optimization: h200 4x8", "h100-optimization: h100 8x8"]  # named by sweep and layout
    assert "h200-optimization vs. h100-optimization" in fig.get_suptitle()
    plt.close(fig)
    fig, res = scale_compare.draw(opt)
    assert any("only sweep h200-optimization" in m for m in res.missing)
    plt.close(fig)
    fig, res = timeline.draw(opt)
    assert res.n_points == 32 and len(res.cells) == 1
    assert sum(1 for line in fig.axes[0].get_lines() if (line.get_gid() or "").startswith("gpu:")) == 32
    plt.close(fig)
    fig, res = throttle.draw(opt)
    assert res.n_points == 60 and any(p.get_gid() == "reason:sw_power_cap" for p in fig.axes[0].patches)
    plt.close(fig)


def test_figures_from_a_cell_with_oom_and_no_telemetry(tmp_path: Path) -> None:
    """Real per-cell tables (hand-made cell folders): one measured cell, one OOM, one without telemetry."""
    a = builders.cell_dict()
    b = builders.cell_dict(micro_batch=4)
    c = builders.cell_dict(optimization_label="act", recompute="full", pp=1, dp=2, parallel_label="TP1-PP1-DP2")
    t = {n: [] for n in ("runs", "gpus", "steps", "kernels", "timeseries")}
    for cell, st, tele in ((a, "ok", True), (b, "oom", True), (c, "ok", False)):
        tb = cell_tables(builders.write_cell(tmp_path, cell, st, tele))
        for n, df in tb.items():
            t[n].append(df)
    tables = {n: pd.concat(v, ignore_index=True) for n, v in t.items()}
    tables["runs"] = runs_table([{**x, "status": "planned"} for x in (a, b, c)], tables["runs"])
    fig, res = fig13_microbatch.draw(tables)
    assert _bands(fig, "oom") == 3 and res.n_points == 3  # mb1, mb4 (OOM) of one configuration, act of the other
    plt.close(fig)
    fig, res = fig10_kernels.draw(tables)
    assert res.n_points == 1 and any("kernel trace" in m for m in res.missing)  # act cell has no trace
    plt.close(fig)
    for name in FIGURES:
        r = render(name, tables, tmp_path / f"{name}.png", tmp_path / f"{name}.pdf")
        assert (tmp_path / f"{name}.png").stat().st_size > 5000, name
        assert r.name == name
    assert plt.get_fignums() == []


def test_rendering_is_deterministic(tmp_path: Path, opt) -> None:
    for k in (1, 2):
        render("fig04_parallelism", opt, tmp_path / f"a{k}.png", tmp_path / f"a{k}.pdf")
    assert (tmp_path / "a1.png").read_bytes() == (tmp_path / "a2.png").read_bytes()
    assert (tmp_path / "a1.pdf").read_bytes() == (tmp_path / "a2.pdf").read_bytes()
