"""The rules every figure follows, checked on synthetic sweeps of 2, 20 and 200 cells and on the shipped
GPU records: no overlapping or cut-off text, per-model axes, comparisons that say what they do not hold fixed,
honest colour scales with zero and missing distinct, and a note on what a figure could not draw and why."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, SWEEPS
from figure_rules import text_overlaps, texts_off_canvas
from synthetic import synthetic_tables

from calorimeter.analysis.tables import read_tables
from calorimeter.figures import (
    FIGURES,
    fig04_parallelism,
    fig05_links,
    fig08_optimization,
    fig10_kernels,
    fig13_microbatch,
    fig17_temperature,
)
from calorimeter.plan.plan import plan_file

REFERENCE = ROOT / "results" / "reference"
SHIPPED = ("h200x4-2026-11-21/h200x4-parallelism", "h200x8-2026-11-21/h200x8-parallelism")


def study_cells(n: int) -> list[dict]:
    """The first ``n`` cells of the study's sweeps (H200 optimization, micro-batch, parallelism, H100)."""
    cells = []
    for s in ("h200-optimization", "h200-microbatch", "h200-parallelism", "h100-optimization"):
        for pc in plan_file(SWEEPS / f"{s}.yaml").cells:
            d = pc.to_dict()
            d["cell_id"] = f"{s}:{d['cell_id']}"
            cells.append(d)
    return cells[:n]


def assert_readable(tables: dict[str, pd.DataFrame], label: str) -> None:
    for name, module in FIGURES.items():
        fig, res = module.draw(tables)
        assert text_overlaps(fig) == [], f"{label} {name}: overlapping text"
        assert texts_off_canvas(fig) == [], f"{label} {name}: text off the canvas"
        assert res.name == name
        plt.close(fig)


@pytest.mark.integration  # renders every figure and measures every text: minutes on 2 shared cores
@pytest.mark.parametrize("n", [2, 20])
def test_no_text_overlaps_on_synthetic_sweeps(n: int) -> None:
    assert_readable(synthetic_tables(study_cells(n), run_pruned=True, timeseries_bins=20), f"{n} cells")


@pytest.mark.integration
def test_no_text_overlaps_at_200_cells() -> None:
    assert_readable(synthetic_tables(study_cells(200), run_pruned=True, timeseries_bins=20), "200 cells")


@pytest.mark.integration
@pytest.mark.parametrize("folder", SHIPPED)
def test_no_text_overlaps_on_shipped_records(folder: str) -> None:
    assert_readable(read_tables(REFERENCE / folder / "tables"), folder)


def test_comparisons_say_what_they_do_not_hold_fixed() -> None:
    """4x H200: the ZeRO-3 layouts ran with overlap on and the others with it off; Fig. 4 says so."""
    t = read_tables(REFERENCE / SHIPPED[0] / "tables")
    fig, res = fig04_parallelism.draw(t)
    notes = " ".join(x.get_text() for x in fig.texts if x.get_gid() == "missing")
    assert "llama3-8b overlap: off (" in notes and "/ on (T2+SP-FSDP, T1-FSDP)" in notes
    plt.close(fig)
    # Fig. 8 and 13 say which comparisons the sweep cannot make
    for module, knob in ((fig08_optimization, "overlap"), (fig13_microbatch, "micro-batch")):
        fig, res = module.draw(read_tables(REFERENCE / SHIPPED[1] / "tables"))
        assert any(f"no configuration measured at two {knob} values" in m for m in res.missing)
        plt.close(fig)


def test_fig10_keeps_overlap_on_pairs() -> None:
    t = read_tables(REFERENCE / SHIPPED[0] / "tables")
    fig, res = fig10_kernels.draw(t)
    labels = [x.get_text() for x in fig.axes[0].get_xticklabels()]
    assert labels.count("cc") == labels.count("cc+act") > 0  # the ZeRO-3 pairs (overlap on) are drawn
    runs = t["runs"].set_index("cell_id")
    assert set(runs.loc[res.cells, "overlap"]) == {True, False}
    plt.close(fig)


def test_fig5_nvlink_only_zero_and_missing_distinct() -> None:
    t = read_tables(REFERENCE / SHIPPED[1] / "tables")
    gpus = t["gpus"].copy()
    first = t["runs"].loc[t["runs"]["status"] == "ok", "cell_id"].iloc[0]
    i0, i1 = gpus.index[gpus["cell_id"] == first][:2]
    gpus.loc[i0, "nvlink_rx_bytes"] = 0.0  # a measured zero
    gpus.loc[i1, "nvlink_rx_bytes"] = np.nan  # no data
    fig, res = fig05_links.draw({**t, "gpus": gpus})
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 1 and panels[0].get_title().startswith("NVLink")
    assert any("PCIe" in m and "docs/findings.md" in m for m in res.missing)  # says why PCIe is not drawn
    gids = [p.get_gid() for p in panels[0].patches]
    assert gids.count("zero") == 1 and gids.count("nodata") == 1
    legend = [x.get_text() for x in fig.legends[0].get_texts()]
    assert legend == ["0 (measured)", "no data"]
    plt.close(fig)


def test_volume_scale_is_linear_from_zero_unless_it_spans_two_decades() -> None:
    from matplotlib.colors import LogNorm

    from calorimeter.figures.heatmaps import color_norm

    narrow, how = color_norm(np.array([100.0, 101.0, np.nan]), "volume")
    assert (narrow.vmin, narrow.vmax, how) == (0, 101.0, "linear from 0")  # a 1% range is not stretched
    wide, how = color_norm(np.array([0.0, 1.0, 1000.0]), "volume")
    assert isinstance(wide, LogNorm) and how == "log scale"


def test_fig17_has_gpu_and_hbm_temperature() -> None:
    t = read_tables(REFERENCE / SHIPPED[0] / "tables")
    fig, res = fig17_temperature.draw(t)
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    assert titles == ["Avg. GPU temperature (°C)", "Peak GPU temperature (°C)", "Avg. HBM temperature (°C)",
                      "Peak HBM temperature (°C)"]
    hbm = [ax for ax in fig.axes if ax.get_images() and "HBM" in ax.get_title()][0].get_images()[0].get_array()
    assert np.isfinite(hbm).all()
    plt.close(fig)
