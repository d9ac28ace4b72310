"""Every file name of a sweep's result folder, spelled once.

Layout (``results/<sweep>/``)::

    plan.json                               every cell of the sweep, planned or pruned with reasons
    tables/<table>.parquet                  the aggregated store (runs, gpus, steps, kernels, timeseries, configs)
    summary.parquet|.csv                    the runs table
    findings.csv|.html                      the study's findings checked on the sweep
    figures/<name>.png|.pdf|.json           the figures, and what each drew
    logs/                                   one log per rule and job
    cells/<cell_id>/run.json                the cell's record, written last (its completion marker)
    cells/<cell_id>/steps.parquet           per rank and step: phase, loss, time_s, wall timestamps
    cells/<cell_id>/telemetry.parquet       GPU samples of every node (where the sampler ran)
    cells/<cell_id>/host_telemetry.parquet  host samples of every node
    cells/<cell_id>/telemetry.json          per node: sampler metadata, conversion report
    cells/<cell_id>/kernels.parquet         kernel breakdown of the traced ranks
    cells/<cell_id>/cell_tables/<table>.parquet   that cell's rows of each sweep table
    cells/<cell_id>/latest -> attempts/<UTC>      the newest attempt
    cells/<cell_id>/attempts/<UTC>/               one attempt (see :class:`AttemptPaths`), never deleted
    cells/<cell_id>/attempts/<UTC>/staging/restart<k>/progress.jsonl   rank 0's progress, one line per step

The paths accept Snakemake wildcards as parts (``CellPaths.of(results, "{sweep}", "{cell}").run_json``), so the
workflow's rules spell their files through the same object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from calorimeter.plan.kinds import KINDS

RUN_JSON = "run.json"
STEPS_PARQUET = "steps.parquet"
TELEMETRY_PARQUET = "telemetry.parquet"
HOST_TELEMETRY_PARQUET = "host_telemetry.parquet"
TELEMETRY_JSON = "telemetry.json"
KERNELS_PARQUET = "kernels.parquet"
#: what a cell's telemetry gave the hosts' thermal profiles (derived from its tables by rule ``thermal_profile``)
THERMAL_PROFILE_JSON = "thermal-profile.json"
#: the files of a cell's record (what is kept of a measurement; the rest is rebuilt or evidence)
RECORD_FILES = (RUN_JSON, STEPS_PARQUET, TELEMETRY_PARQUET, HOST_TELEMETRY_PARQUET, TELEMETRY_JSON, KERNELS_PARQUET)
#: a cell's rows of each sweep table (a folder next to its record)
CELL_TABLES = "cell_tables"
#: the layout of the per-cell tables: the workflow's cell_tables rule takes it as a parameter, so a cell whose tables
#: were written under another layout is tabled again (Snakemake reruns a job whose parameters changed; it does not see
#: a change of the code it imports). Bump it with every change of a per-cell table's columns or their meaning
#: (tests/test_cell_tables_layout.py holds the columns it stands for). 2: runs.host_cpus; 3:
#: runs.host_dispatch_us; 4: runs.host_cpu_util_pct, runs.host_steal_pct; 5: runs.machine (the GPUs' UUIDs); 6:
#: gpus.temp_slope_c_per_min and temp_drift_c, runs.temp_drift_c, temp_slope_c_per_min and thermally_steady; 7:
#: gpus.sm_clock_loaded_avg_mhz and runs.sm_clock_loaded_avg_mhz (the SM clock under load); 8: gpus.power_avg_w
#: from the energy counter where sampled power is observed over too little of the window (power_source).
CELL_TABLES_LAYOUT = 8
#: the tables of a sweep (and of each cell), in their order
TABLE_NAMES: tuple[str, ...] = ("runs", "gpus", "steps", "kernels", "timeseries")
#: the sweep's table over repetitions (one row per configuration; made from the runs table, no per-cell part)
CONFIGS_TABLE = "configs"


def record_files() -> tuple[str, ...]:
    """The top-level files and folders of a cell's record, ``run.json`` last (set aside in this order)."""
    kind_files = tuple(f for k in KINDS.values() for f in k.outputs)
    return (*(f for f in RECORD_FILES if f != RUN_JSON), *kind_files, CELL_TABLES, THERMAL_PROFILE_JSON, RUN_JSON)


def _file(name: str, doc: str) -> property:
    """A file directly in the folder (``root / name``)."""
    return property(lambda self: self.root / name, doc=doc)


def results_relative(path: str | Path, cell_root: str | Path) -> str:
    """``path`` relative to the results folder of the cell ``<results_dir>/<sweep>/cells/<cell_id>``: what a record
    stores, so that it names no machine's folders and still reads after the results are moved."""
    return os.path.relpath(Path(path).absolute(), Path(cell_root).absolute().parents[2])


@dataclass(frozen=True)
class SweepPaths:
    """The folder of one sweep, ``<results_dir>/<sweep>``."""

    root: Path

    plan_json = _file("plan.json", "Every cell of the sweep with its plan status.")
    summary_parquet = _file("summary.parquet", "The runs table under its summary name.")
    summary_csv = _file("summary.csv", "The runs table as CSV.")
    findings_csv = _file("findings.csv", "The study's findings checked on this sweep.")
    findings_html = _file("findings.html", "The findings as the report's section.")

    @classmethod
    def of(cls, results_dir: str | Path, sweep: str) -> SweepPaths:
        """``<results_dir>/<sweep>``."""
        return cls(Path(results_dir) / sweep)

    def table(self, name: str) -> Path:
        """``tables/<name>.parquet``: one aggregated table."""
        return self.root / "tables" / f"{name}.parquet"

    def figure(self, name: str, ext: str) -> Path:
        """``figures/<name>.<ext>``."""
        return self.root / "figures" / f"{name}.{ext}"

    def log(self, name: str) -> Path:
        """``logs/<name>.log``."""
        return self.root / "logs" / f"{name}.log"

    def cell(self, cell_id: str) -> CellPaths:
        """The folder of one cell."""
        return CellPaths(self.root / "cells" / cell_id)


@dataclass(frozen=True)
class CellPaths:
    """The folder of one cell, ``<results_dir>/<sweep>/cells/<cell_id>``."""

    root: Path

    run_json = _file(RUN_JSON, "The record, written last.")
    steps = _file(STEPS_PARQUET, "Per rank and step timings.")
    telemetry = _file(TELEMETRY_PARQUET, "GPU samples of every node.")
    host_telemetry = _file(HOST_TELEMETRY_PARQUET, "Host samples of every node.")
    telemetry_json = _file(TELEMETRY_JSON, "Sampler metadata per node.")
    kernels = _file(KERNELS_PARQUET, "Kernel breakdown of the traced ranks.")
    thermal_profile = _file(THERMAL_PROFILE_JSON, "The host profiles derived from this cell, or why none.")
    attempts = _file("attempts", "Every attempt, one folder each.")
    latest = _file("latest", "Link to the newest attempt.")

    @classmethod
    def of(cls, results_dir: str | Path, sweep: str, cell_id: str) -> CellPaths:
        """``<results_dir>/<sweep>/cells/<cell_id>``."""
        return SweepPaths.of(results_dir, sweep).cell(cell_id)

    def table(self, name: str) -> Path:
        """``cell_tables/<name>.parquet``: this cell's rows of one sweep table."""
        return self.root / "cell_tables" / f"{name}.parquet"

    def attempt(self, name: str) -> AttemptPaths:
        """One attempt by its folder name."""
        return AttemptPaths(self.attempts / name)


@dataclass(frozen=True)
class AttemptPaths:
    """One attempt of a cell, ``<cell>/attempts/<UTC time>``.

    ``job.json`` (job id, executor, the cell it runs), ``submitit/`` (submitit's pickles and per-rank logs),
    ``staging/`` (``rank-<r>.json`` of every rank; ``restart<k>/`` the telemetry and traces of run ``k``),
    ``interrupted/restart-<k>/`` (rank results of runs that were requeued and restarted), ``requeues.jsonl``
    (one line per preemption or time-limit signal), ``run.json`` + ``steps.parquet`` (the attempt's record).
    ``calorimeter rerun`` moves the cell's top-level record here (``set_aside.json`` says when and why): the attempt
    folder then holds the whole record under the cell folder's names and reads as a :class:`CellPaths`.
    """

    root: Path

    job_json = _file("job.json", "The submitted job.")
    submitit = _file("submitit", "submitit's folder (pickles, per-rank logs).")
    staging = _file("staging", "Where the ranks write.")
    requeues = _file("requeues.jsonl", "One JSON line per preemption or time-limit signal.")
    run_json = _file(RUN_JSON, "The attempt's record.")
    steps = _file(STEPS_PARQUET, "The attempt's step timings.")
    set_aside = _file("set_aside.json", "When and why `calorimeter rerun` moved the cell's record here.")
    peer_died = _file("peer_died.json", "The first rank the launcher saw die without a result (launch.watch).")
    launcher_cancelled = _file("launcher_cancelled.json", "Why the launcher cancelled the job (a lost node, ...).")
    record_error = _file("record_error.json", "Why the finished measurement's record could not be written.")

    @property
    def name(self) -> str:
        """The folder name (UTC time of the attempt)."""
        return self.root.name

    def rank_json(self, rank: int) -> Path:
        """One rank's result."""
        return self.staging / f"rank-{rank}.json"

    def rank_jsons(self) -> list[Path]:
        """Every rank result present."""
        return sorted(self.staging.glob("rank-*.json"))

    def run(self, restart: int) -> RunPaths:
        """Telemetry and traces of one run of the job (``restart`` = how often it was requeued before)."""
        return RunPaths(self.staging / f"restart{restart}")

    def runs(self) -> list[RunPaths]:
        """Every run of the job present (one per requeue), oldest first."""
        found = [p for p in self.staging.glob("restart*") if p.name.removeprefix("restart").isdigit()]
        return [RunPaths(p) for p in sorted(found, key=lambda p: int(p.name.removeprefix("restart")))]

    def interrupted(self, restart: int) -> Path:
        """Rank results of a run that was requeued, set aside."""
        return self.root / "interrupted" / f"restart-{restart}"


@dataclass(frozen=True)
class RunPaths:
    """One run of an attempt's job, ``staging/restart<k>``: the node samplers' streams and the traced ranks'
    profiles, turned into the cell's telemetry files when the attempt ends."""

    root: Path

    traces = _file("traces", "torch.profiler traces of the traced ranks.")
    progress = _file("progress.jsonl", "Rank 0's progress: one JSON line per finished step (records.progress).")

    def node(self, node: int) -> Path:
        """The sampler streams of one node."""
        return self.root / "telemetry" / f"node{node}"

    def sampler_failed(self, node: int) -> Path:
        """Why a node's sampler did not start (written instead of its streams)."""
        return self.node(node) / "sampler-failed.txt"

    def nodes(self) -> list[Path]:
        """Every node folder present."""
        return sorted((self.root / "telemetry").glob("node*"))

    def trace(self, rank: int) -> Path:
        """One traced rank's profile."""
        return self.traces / f"rank-{rank}.json.gz"
