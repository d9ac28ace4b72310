"""Every committed set rebuilds from its records to the committed numbers. Each cell's tables are computed once from
its record (in memory, by the functions the rules ``cell_tables`` and ``table_*`` run: nothing is written next to the
committed files), and two checks read them:

1. every committed table comes back bit for bit: the per-cell tables concatenated, the runs table with the plan's
   other cells and the sweep-wide normalisation, the configs table over repetitions;
2. `calorimeter compare`'s core, given the committed tables and the runs rebuilt from the records, finds every
   comparable metric with a zero difference (and so never *not reproduced*; where the regime's noise is wider than a
   floor, e.g. host-bound cells, it *cannot tell*).

The unit tests rebuild one small set (:data:`UNIT_SET`); `make test` rebuilds every set (integration: half a minute
of CPU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from calorimeter.analysis.damaged import readable_cell_tables
from calorimeter.analysis.repeats import configs_table
from calorimeter.analysis.tables import load_plan_cells, runs_table
from calorimeter.records.legacy import upgrade_runs
from calorimeter.records.paths import TABLE_NAMES, SweepPaths
from calorimeter.reproduce import sources
from calorimeter.reproduce.compare import NOT_COMPARABLE, NOT_REPRODUCED, compare
from calorimeter.reproduce.sources import Source, load_source, tables_from_records

REFERENCE = ROOT / "results" / "reference"
#: every committed sweep with its tables and records
SWEEPS = sorted(p.parent.parent for p in REFERENCE.glob("**/tables/runs.parquet")
                if (p.parent.parent / "cells").is_dir())
#: the set the unit tests rebuild: five cells with telemetry, host telemetry and kernels
UNIT_SET = REFERENCE / "findings-2026-11-23" / "h100x1-findings"
#: sort keys of the tables' rows
ROW_KEYS = ("cell_id", "config_id", "node", "gpu_index", "rank", "device", "step", "t_rel_s")


def _same(shipped: pd.DataFrame, rebuilt: pd.DataFrame, what: str) -> None:
    """Every committed column back, with the same values in the same rows (new columns may be added)."""
    if shipped.empty and rebuilt.empty:
        return
    missing = [c for c in shipped.columns if c not in rebuilt.columns]
    assert not missing, f"{what}: columns no longer computed: {missing}"
    assert len(shipped) == len(rebuilt), f"{what}: {len(shipped)} rows shipped, {len(rebuilt)} rebuilt"
    keys = [k for k in ROW_KEYS if k in shipped.columns]
    a = shipped.sort_values(keys, kind="stable").reset_index(drop=True) if keys else shipped
    b = rebuilt[list(shipped.columns)].sort_values(keys, kind="stable").reset_index(drop=True) if keys else rebuilt
    for c in shipped.columns:
        pd.testing.assert_series_equal(a[c], b[c], check_dtype=False, check_exact=True, check_names=False,
                                       obj=f"{what}.{c}")


def _tables_come_back_bit_for_bit(sweep: Path, cell_tables) -> None:
    paths = SweepPaths(sweep)
    per_cell = [cell_tables(run.parent) for run in sorted(sweep.glob("cells/*/run.json"))]
    assert [notes for _, notes in per_cell if notes] == []  # every committed file reads
    for name in TABLE_NAMES:
        frames = [getattr(t, name) for t, _ in per_cell if not getattr(t, name).empty]
        rebuilt = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if name == "runs":
            rebuilt = runs_table(load_plan_cells(paths.plan_json), rebuilt)
            _same(pd.read_parquet(paths.table("configs")), configs_table(rebuilt), f"{sweep}/configs")
        _same(pd.read_parquet(paths.table(name)), rebuilt, f"{sweep}/{name}")


def _compare_finds_no_difference(sweep: Path) -> None:
    committed = load_source(sweep)
    runs, gpus = tables_from_records(sweep)
    rebuilt = Source(sweep, upgrade_runs(runs), committed.engines, ["records"], gpus)
    res = compare(committed, rebuilt)
    measured = res[res["verdict"] != NOT_COMPARABLE]
    nc = res[res["verdict"] == NOT_COMPARABLE]["reason"]
    # only non-training cells, configurations that ran out of memory on both sides and, in a sweep run without the
    # node sampler (telemetry: {enabled: false}), its power and temperature metrics are not compared
    allowed = "no training metrics|no ok repetition on either side"
    if not any("telemetry.parquet" in json.loads(r.read_text()).get("telemetry_files", [])
               for r in sweep.glob("cells/*/run.json")):
        allowed += "|no value of (?:power|energy|temp)[a-z_]* in the reference"
    assert nc.str.contains(allowed).all(), set(nc)
    assert (measured["verdict"] != NOT_REPRODUCED).all() and (measured["machine_difference"] == 0).all()
    assert (measured["difference"].abs() < 1e-9).all(), measured.loc[measured["difference"].abs().idxmax()]


@pytest.mark.parametrize("sweep", [pytest.param(s, id=str(s.relative_to(REFERENCE)),
                                                marks=() if s == UNIT_SET else pytest.mark.integration)
                                   for s in SWEEPS])
def test_committed_set_rebuilds_to_its_numbers(sweep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git_status = ["git", "status", "--porcelain", "--", str(sweep)]
    before = subprocess.run(git_status, cwd=ROOT, capture_output=True, text=True).stdout
    computed: dict[Path, tuple] = {}

    def once(cell: Path) -> tuple:
        """A cell's tables (and notes on unreadable files), computed once for both checks."""
        if cell not in computed:
            computed[cell] = readable_cell_tables(cell)
        return computed[cell]

    monkeypatch.setattr(sources, "readable_cell_tables", once)  # what tables_from_records reads each cell with
    _tables_come_back_bit_for_bit(sweep, once)
    _compare_finds_no_difference(sweep)
    assert len(computed) == len(list(sweep.glob("cells/*/run.json")))  # no cell computed twice
    assert subprocess.run(git_status, cwd=ROOT, capture_output=True, text=True).stdout == before  # nothing written


def test_rebuild_command_writes_outside_the_committed_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from calorimeter.cli import main
    from calorimeter.reproduce.rebuild import copy_records, plan_rebuild

    sets = sorted({s.parent for s in SWEEPS})
    for ref in sets:
        for st in plan_rebuild(ref, Path("results") / "rebuild" / ref.name):
            assert st.command is not None or st.sweep == "default", st  # every sweep but the CPU default one
            if st.command:  # run in the scratch folder, which is the results folder
                i = st.command.index("--directory")
                assert st.command[i + 1] == str(Path("results") / "rebuild" / ref.name)
                assert "results_dir=." in st.command
    assert main(["rebuild", str(ROOT / "results/reference/findings-2026-11-23"), "-n"]) == 0
    out = capsys.readouterr().out
    assert "--directory results/rebuild/findings-2026-11-23 --configfile" in out
    assert "config/reference/h100x1-findings.yaml --config results_dir=." in out
    copy_records(ROOT / "results/reference/findings-2026-11-23", tmp_path)
    copied = tmp_path / "h100x1-findings"
    assert (copied / "tables" / "runs.parquet").is_file() and not list(copied.glob("cells/*/cell_tables"))
    with pytest.raises(FileExistsError, match="nothing is overwritten"):
        copy_records(ROOT / "results/reference/findings-2026-11-23", tmp_path)
