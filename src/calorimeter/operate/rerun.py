"""``calorimeter rerun``: run the failed, OOM or chosen cells of a sweep again, and nothing else.

1. Select the cells (:func:`select`): ``--failed`` (state ``failed``, every class: failed, timeout, transient,
   damaged record; and ``interrupted``), ``--oom``, ``--cells GLOB`` (cell ids, any state but running or queued);
   pruned cells are never run. A cell an earlier rerun set aside that has not run since (Snakemake could not start,
   or was stopped) counts as its set-aside record's state: the same command selects it again.
2. Set each selected cell's record aside (:func:`set_aside`): the top-level ``run.json``, ``steps.parquet``,
   telemetry, kernel and kind files and ``cell_tables/`` move into the attempt that measured them
   (``attempts/<UTC>/``, which already keeps a copy of ``run.json`` and ``steps.parquet``), ``run.json`` last, with
   ``set_aside.json`` saying when and why. That folder then reads as a cell folder (same file names); nothing is
   deleted or overwritten (a file that differs from the attempt's copy goes to ``set-aside-<UTC>/`` inside it).
3. Run Snakemake on exactly those cells' records (``snakemake <run.json of each> --configfile <sweep>``; nothing
   else can enter the DAG: a record's only producer is its cell's train job), then ``snakemake figures``, which
   rebuilds the tables and figures from the records that exist and never trains.

Arguments after ``--`` go to both Snakemake calls (``-- --profile profiles/slurm``).
"""

from __future__ import annotations

import filecmp
import fnmatch
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.operate.state import CellStatus
from calorimeter.plan.config_errors import ConfigError, short, suggest
from calorimeter.plan.json_types import JsonObject
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import AttemptPaths, CellPaths, record_files
from calorimeter.records.run_record import RecordError, read_run_record

#: states ``--failed`` selects
FAILED_STATES = ("failed", "interrupted")
#: states never selected (their job is alive)
ACTIVE_STATES = ("running", "queued")


def select(statuses: list[CellStatus], failed: bool = False, oom: bool = False,
           globs: tuple[str, ...] = ()) -> list[CellStatus]:
    """The cells to rerun, in plan order; a ConfigError when a glob matches nothing, or a chosen cell is pruned or
    running, or nothing at all is chosen."""
    ids = [cs.cell_id for cs in statuses]
    for g in globs:
        if not any(fnmatch.fnmatchcase(i, g) for i in ids):
            raise ConfigError(f"--cells {short(g)} matches no cell of the sweep{suggest(g, ids)}")
    chosen = [cs for cs in statuses
              if (failed and _state(cs) in FAILED_STATES) or (oom and _state(cs) == "oom")
              or any(fnmatch.fnmatchcase(cs.cell_id, g) for g in globs)]
    pruned = [cs for cs in chosen if cs.state == "pruned"]
    if pruned and globs:
        raise ConfigError(f"{len(pruned)} chosen cells are pruned and never run, e.g. {pruned[0].cell_id}: "
                          f"{short(pruned[0].reason, 200)}")
    active = [cs for cs in chosen if cs.state in ACTIVE_STATES]
    if active:
        raise ConfigError(f"{len(active)} chosen cells are {active[0].state} now (e.g. {active[0].cell_id}, job "
                          f"{active[0].job_id}): wait for them, or cancel their jobs first")
    return chosen


def _state(cs: CellStatus) -> str:
    """A cell's state for selection: a cell whose record an earlier rerun set aside (and which has not run again
    since, e.g. Snakemake could not start) counts as that record's state, so the same command selects it again."""
    return cs.aside_state if cs.state == "planned" and cs.aside_state else cs.state


@dataclass
class SetAside:
    """Where one cell's record went."""

    cell_id: str
    folder: Path | None
    files: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line."""
        if not self.files:
            return f"{self.cell_id}: no record to set aside"
        return f"{self.cell_id}: {', '.join(self.files)} -> {self.folder}"


def _record_attempt(cell: CellPaths) -> AttemptPaths | None:
    """The attempt that wrote the cell's top-level record (named in it), if it is there."""
    try:
        name = read_run_record(cell.run_json).launcher.get("attempt")
    except RecordError:
        return None
    attempt = cell.attempt(str(name)) if name and "/" not in str(name) else None
    return attempt if attempt is not None and attempt.root.is_dir() else None


def _same(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and filecmp.cmp(a, b, shallow=False)


def set_aside(cell: CellPaths, why: str, now: float | None = None) -> SetAside:
    """Move a cell's top-level record into the attempt that measured it (module docstring); a cell without a
    record is left as it is."""
    present = [name for name in record_files() if (cell.root / name).exists()]
    if not present:
        return SetAside(cell.root.name, None)
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    attempt = _record_attempt(cell)
    if attempt is None:  # a record from elsewhere (copied in, an older writer): a folder of its own
        attempt = cell.attempt(f"{stamp}-set-aside")
        n = 1
        while attempt.root.exists():
            attempt, n = cell.attempt(f"{stamp}-set-aside-{n}"), n + 1
        attempt.root.mkdir(parents=True)
    moved = []
    for name in present:
        src, dest = cell.root / name, attempt.root / name
        if dest.exists() and not _same(src, dest):
            dest = attempt.root / f"set-aside-{stamp}" / name
            dest.parent.mkdir(exist_ok=True)
        os.replace(src, dest)  # same file system: atomic, never a copy
        moved.append(str(dest.relative_to(attempt.root)))
    note: JsonObject = {"time_s": now, "time_utc": stamp, "by": "calorimeter rerun", "why": why,
                            "files": moved}
    previous = []
    if attempt.set_aside.is_file():
        try:
            previous = json.loads(attempt.set_aside.read_text()).get("history", [])
        except (OSError, ValueError, AttributeError):
            previous = []

    write_json_atomic(attempt.set_aside, {**note, "history": [*previous, note]})
    return SetAside(cell.root.name, attempt.root, moved)


def snakemake_commands(sweep_file: str, targets: list[str], extra: list[str]) -> list[list[str]]:
    """The two Snakemake calls: train exactly ``targets`` (records), then rebuild tables and figures."""
    base = [sys.executable, "-m", "snakemake"]
    snakefile = _snakefile()
    where = ["--snakefile", str(snakefile)] if snakefile is not None else []
    return [[*base, *targets, *where, "--configfile", sweep_file, *extra],
            [*base, "figures", *where, "--configfile", sweep_file, *extra]]


def _snakefile() -> Path | None:
    """The workflow's Snakefile when the current folder has none (the command was typed elsewhere)."""
    if Path("Snakefile").is_file():
        return None
    root = Path(__file__).resolve().parents[3] / "Snakefile"
    return root if root.is_file() else None


def run_commands(commands: list[list[str]]) -> int:
    """Run each command in turn (the second even when the first failed: the tables then show what failed);
    the first non-zero exit status, or 0."""
    rc = 0
    for cmd in commands:
        print("+ " + shell_line(cmd), flush=True)
        code = subprocess.run(cmd).returncode
        rc = rc or code
    return rc


def shell_line(cmd: list[str]) -> str:
    """A command as the user would type it (``snakemake ...`` for ``python -m snakemake ...``)."""
    if cmd[1:3] == ["-m", "snakemake"]:
        cmd = ["snakemake", *cmd[3:]]
    return " ".join(shlex.quote(c) for c in cmd)
