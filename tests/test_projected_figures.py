"""The study's sweeps projected at their scale (calorimeter.reproduce.study) and the projection's figures: every cell
kept (projected, refused with the reason, pruned), drawn as the study draws it and marked projected, measured cells
beside; projection.png as dots with bands (no bars, no 5,000-px strip); the validation as error distributions per
metric and regime (no legend per fold)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, SWEEPS

from calorimeter.figures import projected_study, projection, projection_validation
from calorimeter.plan.plan import plan_file
from calorimeter.projection.calibration import load_calibrations
from calorimeter.projection.cost import committed_set
from calorimeter.projection.coverage import reason_kind
from calorimeter.projection.study import StudyProjector, plan_rows, refusal
from calorimeter.projection.sweep import project_plan
from calorimeter.reproduce.study import project_study


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """Every cell of the study's H100 optimization sweep (68: projected, MoE refused while the H100 calibration has
    fewer than five MoE configurations, pruned)."""
    return plan_rows(plan_file(SWEEPS / "h100-optimization.yaml"),
                     StudyProjector.from_file(committed_set() / "calibration.json"))


@pytest.fixture(scope="module")
def rows_h200() -> pd.DataFrame:
    """The H200 optimization sweep (60): its MoE cells are priced with the measured H200 MoE band."""
    return plan_rows(plan_file(SWEEPS / "h200-optimization.yaml"),
                     StudyProjector.from_file(committed_set() / "calibration.json"))


def _gids(fig: plt.Figure) -> set[str]:
    return {a.get_gid() for a in fig.findobj() if a.get_gid()}


def test_every_cell_of_the_plan_is_a_row_with_its_status_and_reason(rows: pd.DataFrame,
                                                                     rows_h200: pd.DataFrame) -> None:
    assert len(rows) == 68 and set(rows["status"]) == {"projected", "refused", "pruned"}
    refused = rows[rows["status"] == "refused"]
    assert set(refused["model"]) == {"mixtral-8x7b", "mixtral-8x22b"} and refused["reason"].str.startswith("MoE").all()
    assert rows.loc[rows["status"] == "pruned", "reason"].str.contains("memory|divisible|shard").all()
    for r, world in ((rows, 64), (rows_h200, 32)):
        p = r[r["status"] == "projected"]
        assert (p["world_size"] == world).all() and (p["tokens_per_s_per_gpu_low"] < p["tokens_per_s_per_gpu"]).all()
        assert (p["tokens_per_s_per_gpu"] < p["tokens_per_s_per_gpu_high"]).all()
    # on H200 the MoE cells are projected, with their band; every cell is still a row
    assert len(rows_h200) == 60 and set(rows_h200["status"]) == {"projected", "pruned"}
    assert rows_h200.loc[rows_h200["status"] == "projected", "model"].str.startswith("mixtral").any()
    # the model's own refusal column, where it has one, decides; another GPU type's calibration is refused
    assert refusal({"refused": "", "extrapolated_parts": "experts=8 outside [0, 0]"}) == ""
    assert refusal({"refused": "inter-node EP"}) == "inter-node EP"
    assert "no calibration of a100" in refusal({"calibration_relation": "other-gpu", "hardware": "a100"})
    assert reason_kind("estimated memory 151.2 GB per device exceeds the 141 GB of h200 (weights 1)") == \
        "estimated memory # GB per device exceeds the # GB of h200"


def test_the_study_figure_is_drawn_from_projected_rows_marked_projected(rows: pd.DataFrame,
                                                                        rows_h200: pd.DataFrame) -> None:
    some = rows[rows["status"] == "projected"].iloc[0]
    runs = pd.DataFrame([{**some.to_dict(), "status": "ok", "tokens_per_s_per_gpu": 123.0, "power_avg_w": 500.0,
                          "efficiency": 1.0}])
    fig, res = projected_study.draw({"projected": rows, "runs": runs}, "fig08_optimization")
    assert "PROJECTED" in fig._suptitle.get_text() and "watermark" in _gids(fig)
    gids = _gids(fig)
    assert {"band:refused", "band:pruned", "projected:tokens_per_s_per_gpu", "projected:power_avg_w",
            "measured:tokens_per_s_per_gpu"} <= gids
    assert res.n_points == 68 and len(res.cells) == 68  # every cell, none dropped
    assert any(m.startswith("30 refused (MoE") for m in res.missing)
    assert any("pruned (estimated memory # GB" in m for m in res.missing)
    assert res.differs == ["1 cells measured as well (filled markers)"]
    fig4, res4 = projected_study.draw({"projected": rows_h200}, "fig04_parallelism")
    assert res4.n_points == 15  # the study's Fig. 4 selection: one cell per configuration
    assert projected_study.figures_for(rows.to_dict("records")) == ["fig04_parallelism", "fig08_optimization"]


def test_projection_png_is_dots_with_bands_per_model() -> None:
    # the workflow's projected rows (projection_project: every planned cell as the model projects it)
    rows = project_plan(plan_file(SWEEPS / "h100-optimization.yaml"),
                        load_calibrations(committed_set() / "calibration.json"))
    scaled = rows.assign(world_size=1024, cell_id=rows["cell_id"] + "-x1024")
    fig, res = projection.draw({"projected": pd.concat([rows, scaled], ignore_index=True), "runs": pd.DataFrame()})
    width_px = fig.get_figwidth() * 130
    assert width_px < 1600, width_px  # not a 5,200-px strip
    assert not [p for ax in fig.axes for p in ax.patches if p.get_hatch()]  # no bars
    logs = [ax for ax in fig.axes if ax.get_yscale() == "log"]
    assert len(logs) == 4  # gpt3-175b and llama3-70b: tokens/s and energy per token
    assert {"projected:tokens_per_s_per_gpu:64", "projected:tokens_per_s_per_gpu:1024", "refused:64"} <= _gids(fig)
    assert any(m.startswith("60 refused (MoE") for m in res.missing) and "PROJECTED" in fig._suptitle.get_text()


def test_validation_figure_is_error_distributions_per_metric_and_regime() -> None:
    rng = np.random.default_rng(1)
    n = 40
    val = pd.DataFrame({
        "fold": [f"loco {i % 20}" for i in range(n)], "cell_id": [f"c{i}" for i in range(n)],
        "relation": ["match"] * 30 + ["foreign"] * 10, "hardware": ["h200"] * 25 + ["h100"] * 15,
        "predicted_host_bound": [i % 4 == 0 for i in range(n)], "extrapolated": False,
        **{f"{m}_rel_error": rng.normal(0, 0.05, n) for m in ("tokens_per_s_per_gpu", "energy_per_token_j",
                                                              "power_avg_w")},
        **{f"{m}_band": 0.1 for m in ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w")},
        **{f"{m}_covered": True for m in ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w")},
    })
    val.loc[0, "tokens_per_s_per_gpu_rel_error"] = 0.9  # beyond the axis: drawn at its edge, counted
    pro = pd.DataFrame({"cell_id": ["llama3-8b-8l_h200-1x2_tp2", "llama3-8b-8l_h200-1x2_pp2"],
                        "tokens_per_s_per_gpu_rel_error": [0.01, -0.03], "tokens_per_s_per_gpu_band": [0.18, 0.18],
                        "tokens_per_s_per_gpu_covered": [True, True]})
    fig, res = projection_validation.draw({"validation": val, "prospective": pro})
    assert all(ax.get_legend() is None for ax in fig.axes)  # no legend per fold
    labels = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert labels == ["H100 GPU-bound", "H100 host-bound", "H200 GPU-bound", "H200 host-bound", "H200 prospective"]
    # the model's own regimes and designs, where its table names them: base regimes in range, then each way out
    named = val.assign(regime=["dense GPU-bound"] * 20 + ["dense GPU-bound; extrapolated in GPU count"] * 10
                       + ["MoE; extrapolated in GPU count; extrapolated in sequence"] * 10,
                       design=["loco"] * 20 + ["scale"] * 10 + ["cross"] * 10, relation="match")
    fig2, res2 = projection_validation.draw({"validation": named})
    assert [t.get_text() for t in fig2.axes[-1].get_xticklabels()] == [
        "H100 extrapolated in GPU count", "H200 dense GPU-bound", "H200 extrapolated in GPU count"]
    assert "10 runs of extrapolation folds" in fig2._suptitle.get_text()
    title = fig._suptitle.get_text()
    assert "leave one configuration out (30 held-out runs" in title and "prospective check (2 runs" in title
    assert "8-GPU" not in title and any("beyond ±50%" in m for m in res.missing)
    assert any("10 cross-fingerprint predictions" in m for m in res.missing)


def test_study_set_tables_cost_and_readme(tmp_path: Path) -> None:
    done = project_study(tmp_path / "out", sweeps={"config/sweeps/h200-parallelism.yaml": "fig04_parallelism"},
                         figures=False, root=ROOT)
    out = tmp_path / "out"
    table = pd.read_csv(out / "h200-parallelism" / "projected.csv")
    assert len(table) == 15 and set(table["status"]) == {"projected"}  # MoE cells too: the H200 MoE band
    assert table.loc[table["status"] == "projected", "projected_wall_s"].gt(0).all()
    cost = pd.read_csv(out / "cost.csv")
    assert cost.loc[0, "gpu_hours_low"] < cost.loc[0, "gpu_hours"] < cost.loc[0, "gpu_hours_high"]
    assert (cost.loc[0, "projected"], cost.loc[0, "refused"]) == (15, 0)
    readme = (out / "README.md").read_text()
    assert "Nothing here was measured" in readme and "h200/auto-liger" in readme
    assert "calorimeter project-study --calibration" in readme and done[0].figure == "fig04_parallelism"
    committed = committed_set()
    assert json.loads((committed / "calibration.json").read_text())["model_version"] >= 1
    assert (committed / "README.md").is_file() and (committed / "h200-optimization" / "projected.csv").is_file()


def test_an_outdated_committed_calibration_refuses_every_cell_and_says_how_to_rebuild(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "calibration.json").write_text(json.dumps({"model_version": 1, "calibrations": []}))
    (folder / "timing.json").write_text("{}")
    done = project_study(tmp_path / "out", folder, sweeps={"config/sweeps/h200-parallelism.yaml": "fig04_parallelism"},
                         root=ROOT)
    rows = done[0].rows
    assert (rows["status"] == "refused").all() and rows["reason"].str.startswith("no usable calibration").all()
    assert "Nothing projected: no usable calibration" in (tmp_path / "out" / "README.md").read_text()
    assert (tmp_path / "out" / "figures" / "projected_fig04_parallelism-h200-parallelism.png").is_file()
