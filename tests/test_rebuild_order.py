"""Committed tables of different ages give the same findings in any rebuild order (rebuilding the H200
findings sweep alone flipped two verdicts, because the committed H100 table predates the ``kind`` column)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from calorimeter.analysis.cell import PARAM_KEYS
from calorimeter.analysis.tables import read_tables
from calorimeter.findings import evaluate
from calorimeter.findings.select import configs, matched
from calorimeter.records.legacy import RUNS_DEFAULTS, upgrade_runs

SET = ROOT / "results" / "reference" / "findings-2026-11-23"
CROSS_HARDWARE = ("h100_scale_out_wins_compute_bound", "h200_energy_per_token")


def _findings(runs: pd.DataFrame, compare: pd.DataFrame) -> pd.DataFrame:
    t = read_tables(SET / "h200x2-findings" / "tables", ("gpus", "kernels"))
    t.update(runs=runs, compare=compare, compare_missing=pd.DataFrame({"sweep": []}))
    return evaluate(t).set_index("finding")


def _before_kind(path: Path) -> pd.DataFrame:
    """A committed runs table as it was written before the ``kind`` column (these sets were, until they were
    re-tabled for the per-cell tables layout 6)."""
    return pd.read_parquet(path).drop(columns="kind")


def test_findings_do_not_depend_on_which_sweep_was_rebuilt() -> None:
    h200 = _before_kind(SET / "h200x2-findings" / "tables" / "runs.parquet")
    h100 = _before_kind(SET / "h100x1-findings" / "tables" / "runs.parquet")
    rebuilt_h200 = h200.assign(kind="train")  # what today's code writes for the H200 sweep
    as_committed = _findings(upgrade_runs(h200), upgrade_runs(h100))
    h200_first = _findings(upgrade_runs(rebuilt_h200), upgrade_runs(h100))
    pd.testing.assert_series_equal(as_committed["verdict"], h200_first["verdict"])
    pd.testing.assert_series_equal(as_committed["value"], h200_first["value"])
    # catalogue v2 judges these two findings on several nodes only (a precondition these one-node sweeps fail), so
    # the guard is the matching itself: the upgrade lets the two ages match configurations across hardware
    assert len(_cross_hardware(upgrade_runs(h200), upgrade_runs(h100))) == 2
    assert len(_cross_hardware(upgrade_runs(rebuilt_h200), upgrade_runs(h100))) == 2
    # without the upgrade, the mixed-age tables never match a configuration across hardware: the bug this guards
    assert _cross_hardware(rebuilt_h200, h100) == []
    raw = _findings(rebuilt_h200, h100)
    assert all(pd.isna(raw.loc[fid, "value"]) for fid in CROSS_HARDWARE)


def _cross_hardware(a: pd.DataFrame, b: pd.DataFrame) -> list:
    """Groups of configurations equal in all but hardware and size, measured on both hardware types."""
    groups = matched(configs(pd.concat([a, b], ignore_index=True), ["iteration_time_s"]),
                     ("hardware", "gpus_per_node", "world_size", "dp", "nodes"))
    return [g for g in groups if len({c.params["hardware"] for c in g}) > 1]


@pytest.mark.parametrize("table", sorted((ROOT / "results" / "reference").glob("**/tables/runs.parquet")),
                         ids=lambda p: str(p.relative_to(ROOT / "results" / "reference").parent.parent))
def test_every_committed_runs_table_reads_with_todays_parameters(table: Path) -> None:
    runs = read_tables(table.parent, ("runs", "configs"))
    for name, df in runs.items():
        assert set(RUNS_DEFAULTS) <= set(df.columns), name
        assert df[list(RUNS_DEFAULTS)].notna().all().all(), name
    assert set(PARAM_KEYS) - set(runs["runs"].columns) == set()


def test_an_old_table_without_kind_keeps_its_calibration_cell_apart() -> None:
    old = _before_kind(ROOT / "results/reference/h200x2-placement-2026-11-23/h200x2-placement/tables/runs.parquet")
    kinds = upgrade_runs(old).set_index("cell_id")["kind"]
    assert kinds["thermal-calibration_h200-1x2"] == "thermal-calibration"
    assert set(kinds.drop("thermal-calibration_h200-1x2")) == {"train"}
