"""``job.json`` through one door: the job an attempt of a cell submitted (:class:`JobRecord`).

Written by the launcher when it submits (:mod:`calorimeter.launch.submit`, :mod:`calorimeter.launch.arrays`), read
when it re-attaches to an open attempt and by ``calorimeter status`` (:mod:`calorimeter.operate.state`). An attempt
with ``job.json`` and no ``run.json`` is still open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.atomic import write_json_atomic


@dataclass(frozen=True)
class JobRecord:
    """One attempt's job.

    Attributes:
        job_id: the scheduler's job id (a local job's: its controller's pid; an array task's: ``<array>_<index>``).
        executor: ``local`` or ``slurm``.
        cell_id: the cell it runs.
        cell_key: the digest of the cell's parameters (:func:`calorimeter.launch.submit.cell_key`): a changed cell
            never re-attaches to an old job.
        world_size: the cell's ranks.
        submitted_s: when it was submitted (``time.time()``), or None where unknown.
        host: the host it was submitted from (a local job runs there).
        submitit_folder: submitit's folder (pickles, per-rank logs); an array's tasks share the array's.
        array: submitted as part of a SLURM array (:mod:`calorimeter.launch.arrays`).
        launcher: the launcher settings it was submitted with.
    """

    job_id: str
    executor: str
    cell_id: str = ""
    cell_key: str = ""
    world_size: int = 0
    submitted_s: float | None = None
    host: str | None = None
    submitit_folder: str | None = None
    array: bool = False
    launcher: LauncherSettings = field(default_factory=LauncherSettings)

    def to_dict(self) -> JsonObject:
        """The JSON form (``array`` only when true, as before it existed)."""
        out = {"job_id": self.job_id, "executor": self.executor, "submitted_s": self.submitted_s, "host": self.host,
               "cell_id": self.cell_id, "cell_key": self.cell_key, "world_size": self.world_size,
               "submitit_folder": self.submitit_folder, "launcher": self.launcher.to_dict()}
        return {**out, "array": True} if self.array else out

    @classmethod
    def from_dict(cls, d: JsonObject) -> JobRecord:
        """From :meth:`to_dict`'s form (keys an older file lacks take their defaults).

        Raises:
            ValueError: no ``job_id`` or no ``executor``.
        """
        if not isinstance(d, dict) or d.get("job_id") is None or not d.get("executor"):
            raise ValueError("not a job record (no 'job_id' or no 'executor')")
        submitted = d.get("submitted_s")
        return cls(job_id=str(d["job_id"]), executor=str(d["executor"]), cell_id=str(d.get("cell_id") or ""),
                   cell_key=str(d.get("cell_key") or ""), world_size=int(d.get("world_size") or 0),
                   submitted_s=float(submitted) if isinstance(submitted, int | float) else None,
                   host=d.get("host") or None, submitit_folder=d.get("submitit_folder") or None,
                   array=bool(d.get("array")), launcher=LauncherSettings.from_dict(d.get("launcher") or {}))

    def write(self, path: Path) -> None:
        """Write it to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())


def read_job_record(path: Path) -> JobRecord | None:
    """The job record in ``path``; None when it is missing, unreadable or not a job record."""
    try:
        return JobRecord.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError):
        return None
