"""Cell records: atomic writes, outcome classification, the summary table and the first figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from calorimeter.analysis.summary import summarize
from calorimeter.analysis.tables import write_table
from calorimeter.figures import render
from calorimeter.plan import make_plan
from calorimeter.records.atomic import write_atomic, write_json_atomic
from calorimeter.records.paths import CellPaths
from calorimeter.records.rank import RankReport
from calorimeter.records.record import (
    abandoned_record,
    build_record,
    classify_attempt,
    steps_frame,
    write_cell_record,
)


def test_atomic_write_leaves_nothing_on_crash(tmp_path: Path) -> None:
    target = tmp_path / "run.json"

    def crash(p: Path) -> None:
        p.write_text('{"status": "ok"')  # half written
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        write_atomic(target, crash)
    assert not target.exists() and list(tmp_path.iterdir()) == []
    write_json_atomic(target, {"x": float("nan"), "y": [1.0]})
    assert json.loads(target.read_text()) == {"x": None, "y": [1.0]}


def test_records_and_tables_are_written_zstd_compressed_and_read_back_unchanged(tmp_path: Path) -> None:
    """Every Parquet file goes through write_parquet_atomic: zstd (the committed records must fit, with the wheels,
    in what a run on a GPU node may carry), and the frame reads back as written."""
    import pyarrow.parquet as pq

    from calorimeter.records.atomic import write_parquet_atomic

    df = pd.DataFrame({"time_s": [0.05 * i for i in range(400)], "power_w": [650.0 + (i % 7) for i in range(400)],
                       "gpu": ["GPU-x"] * 400, "reasons": pd.array([4, None] * 200, dtype="UInt64")})
    write_parquet_atomic(tmp_path / "t.parquet", df)
    meta = pq.ParquetFile(tmp_path / "t.parquet").metadata
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}
    enc = {meta.schema.column(i).name: meta.row_group(0).column(i).encodings for i in range(meta.num_columns)}
    # floats byte-stream split (parquet_options: 15% smaller reference data), the others dictionary-encoded
    assert "BYTE_STREAM_SPLIT" in enc["time_s"] and "BYTE_STREAM_SPLIT" in enc["power_w"]
    assert "RLE_DICTIONARY" in enc["gpu"] and "BYTE_STREAM_SPLIT" not in enc["gpu"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t.parquet"), df)


def _rank(rank: int, status: str = "ok", t: float = 0.0, **kw: object) -> RankReport:
    steps = [{"step": s, "phase": "warmup" if s < 1 else "measured", "loss": 5.0 - s * 0.1, "time_s": 0.1 + rank * 0.01,
              "t_begin_s": 100.0 + s, "t_end_s": 100.1 + s} for s in range(3)]
    return RankReport.from_dict({"rank": rank, "status": status, "t_end_s": t, "steps": steps if status == "ok" else [],
                                 "peak_memory_bytes": 1e9 * (rank + 1), **kw})


def test_classify() -> None:
    assert classify_attempt([_rank(0), _rank(1)], 2, None) == ("ok", "ok", "")
    st, _, why = classify_attempt([_rank(0, "oom", error="CUDA out of memory"), _rank(1)], 2, None)
    assert st == "oom" and "rank 0" in why and "out of memory" in why
    # The first rank to fail is the cause; the peer's broken connection is a consequence.
    ranks = [_rank(0, "failed", t=2.0, error="peer closed"), _rank(1, "failed", t=1.0, error="ValueError: x")]
    st, _, why = classify_attempt(ranks, 2, None)
    assert st == "failed" and why == "rank 1: ValueError: x"
    st, _, why = classify_attempt([_rank(0)], 2, "FailedJobError: killed by signal 9")
    assert st == "transient" and "1 of 2 ranks left no result" in why and "killed" in why


def test_record_and_steps(tmp_path: Path) -> None:
    plan = make_plan({"sweep": "t", "hardware": "cpu", "grid": [{"model": "tiny-gpt", "gpus_per_node": 2}]})
    cell = plan.cells[0].cell
    ranks = [_rank(0), _rank(1)]
    rec = build_record(cell, ranks, {"executor": "local", "job_id": "42"}, plan.cells[0].estimates)
    assert rec["status"] == "ok" and rec["peak_memory_bytes"] == 2e9
    # Iteration time is the slowest rank per step (0.11 s), averaged over the measured steps.
    assert rec["metrics"]["iteration_time_s"] == pytest.approx(0.11)
    assert rec["metrics"]["samples_per_s"] == pytest.approx(cell.global_batch / 0.11)
    assert [x["step"] for x in rec["loss"]] == [0, 1, 2]
    steps = steps_frame(ranks)
    assert len(steps) == 6 and set(steps["phase"]) == {"warmup", "measured"}
    paths = CellPaths(tmp_path / "cell")
    attempt = paths.attempt("a1")
    write_cell_record(paths, attempt, rec, steps)
    for d in (paths, attempt):
        assert json.loads(d.run_json.read_text())["cell_id"] == cell.cell_id
        assert len(pd.read_parquet(d.steps)) == 6


def test_an_abandoned_attempt_record_reads_as_a_transient_cell_record(tmp_path: Path) -> None:
    """The launcher closes an attempt whose launcher died through the records' writer: the one reader reads it."""
    from calorimeter.records.run_record import read_run_record

    cell = make_plan({"sweep": "t", "hardware": "cpu", "grid": [{"model": "tiny-gpt"}]}).cells[0].cell
    path = tmp_path / "run.json"
    write_json_atomic(path, abandoned_record(cell, "abandoned: its launcher died"))
    rec = read_run_record(path)
    assert (rec.cell_id, rec.status, rec.failure_class, rec.reason) == (
        cell.cell_id, "transient", "transient", "abandoned: its launcher died")
    assert rec.cell == cell.recorded() and rec.kind == "train"


def test_summary_keeps_pruned_and_unrun_cells_and_figure_draws_bands(tmp_path: Path) -> None:
    plan = make_plan({"sweep": "t", "hardware": "cpu", "results_dir": str(tmp_path), "grid": [
        {"model": "tiny-gpt", "gpus_per_node": 2, "pp": [1, 2]},
        {"model": "tiny-gpt", "gpus_per_node": 2, "pp": 2, "zero_stage": 3},  # pruned: pipeline + ZeRO-3
    ]})
    ok_cell, oom_cell, pruned = plan.cells
    rec = build_record(ok_cell.cell, [_rank(0), _rank(1)], {"job_id": "1"})
    oom = build_record(oom_cell.cell, [_rank(0, "oom", error="out of memory")], {"job_id": "2"})
    files = []
    for r in (rec, oom):
        f = tmp_path / r["cell_id"] / "run.json"
        write_json_atomic(f, r)
        files.append(f)
    df = summarize(plan, files)
    assert list(df["status"]) == ["ok", "oom", "pruned"]
    assert list(df["kind"]) == ["train"] * 3  # recorded, OOM and pruned rows all say what the cell runs
    assert "refuses pipeline parallelism with ZeRO-3" in df.loc[2, "reason"]
    assert math.isnan(df.loc[1, "tokens_per_s_per_gpu"]) and df.loc[0, "tokens_per_s_per_gpu"] > 0
    write_table(df, tmp_path / "s.parquet", tmp_path / "s.csv")
    assert len(pd.read_csv(tmp_path / "s.csv")) == 3
    import matplotlib.pyplot as plt

    open_before = plt.get_fignums()  # figures another test left open are not this one's
    n = render("throughput", {"runs": df}, tmp_path / "f.png", tmp_path / "f.pdf").n_points
    assert n == 3 and (tmp_path / "f.png").stat().st_size > 5000 and (tmp_path / "f.pdf").is_file()
    assert plt.get_fignums() == open_before  # the rendered figure was closed


def test_every_committed_record_reads_through_the_one_reader(tmp_path: Path) -> None:
    """records/run_record.py: every run.json under results/reference/ (the oldest included) reads as a RunRecord
    with today's names; what cannot be used says why."""
    from calorimeter.plan.kinds import KINDS
    from calorimeter.records.run_record import SCHEMA_VERSION, RecordError, RunRecord, read_run_record

    files = sorted((Path(__file__).resolve().parents[1] / "results" / "reference").rglob("cells/*/run.json"))
    assert len(files) > 50
    for f in files:
        rec = read_run_record(f)
        assert rec.cell_id == f.parent.name and rec.status in ("ok", "oom", "failed", "transient")
        assert "mfu" not in rec.metrics and rec.schema_version in (1, SCHEMA_VERSION)  # files of both versions
        assert rec.ok == (rec.status == "ok") and isinstance(rec.ranks, list) and rec.kind in KINDS
    old = RunRecord.from_dict({"cell": {"cell_id": "c", "model": "llama3-8b", "seq_len": 8192, "global_batch": 8},
                               "status": "ok", "metrics": {"mfu": 0.4}})
    assert old.metrics["mfu_full"] == 0.4 and 0 < old.metrics["mfu_causal"] < 0.4 and old.kind == "train"
    for text, why in (("{", "not JSON"), ('{"status": "ok"}', "not a cell record"), (None, "missing")):
        path = tmp_path / "run.json"
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_text(text)
        with pytest.raises(RecordError, match=why):
            read_run_record(path)


def test_rank_report_round_trips_and_the_last_run_is_the_attempts(tmp_path: Path) -> None:
    from calorimeter.records.paths import AttemptPaths
    from calorimeter.records.rank import RankResult, last_run, read_rank_reports

    report = RankReport(rank=1, status="ok", restart=1, hostname="h", device_info={"uuid": "GPU-a"}, t_end_s=2.0)
    report.take(RankResult(steps=[{"step": 0, "phase": "measured", "time_s": 0.1}], stage=1, num_stages=2))
    assert RankReport.from_dict(report.to_dict()) == report
    failed = RankReport.from_dict({"rank": 0, "status": "failed", "error": "x", "unknown_key": 1})
    assert (failed.stage, failed.traced, failed.steps) == (None, None, [])  # no result: no stage claimed
    attempt = AttemptPaths(tmp_path)
    attempt.staging.mkdir()
    for r in (report, failed, RankReport(rank=0, status="ok", restart=1)):
        write_json_atomic(attempt.rank_json(r.rank + 10 * r.restart), r.to_dict())
    (attempt.staging / "rank-9.json").write_text("{")  # a half-written file is no report
    assert [(r.rank, r.restart) for r in last_run([r for _, r in read_rank_reports(attempt)])] == [(0, 1), (1, 1)]
