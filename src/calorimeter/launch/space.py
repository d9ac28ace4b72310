"""Disk space of a cell: its own estimate of what its attempt writes, checked before anything is submitted.

What one attempt writes, at most (every term an upper bound, so that a cell that starts has room to finish; a cell
may be refused that would just have fitted):

* the node sampler's streams and their tables: ``1000 / period_ms`` rows per second per GPU (one stream of host
  rows on CPU ranks), for the whole time limit, at :data:`SAMPLE_BYTES` per row (stream row + tidy Parquet row +
  host rows; the shipped 2x H200 records hold about 250 bytes per GPU sample);
* the kernel traces of the profiled steps: :data:`TRACE_BYTES` per traced rank and step on GPUs (a Llama-3 8B
  step's chrome trace is tens of MB), :data:`CPU_TRACE_BYTES` on CPU ranks;
* the record, rank results, logs and tables: :data:`FIXED_BYTES`.

A cell refuses to start (:class:`DiskSpaceError`, class ``disk_full``) when the results folder's file system has
less free space than that. If the disk fills anyway, the writers fail with ``ENOSPC`` (:func:`is_disk_full`) and the
record is never partial (see :func:`calorimeter.launch.run.run_cell`).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import accelerator_of
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.record import TransientCellError

#: bytes written per GPU sample, all copies together (upper bound)
SAMPLE_BYTES = 1024
#: bytes of one traced GPU step's chrome trace (upper bound)
TRACE_BYTES = 256 * 2**20
#: bytes of one traced CPU rank's step
CPU_TRACE_BYTES = 16 * 2**20
#: record, rank results, logs, tables
FIXED_BYTES = 8 * 2**20
#: environment variable that overrides the estimate (bytes), for tests of the refusal
NEED_ENV = "CALORIMETER_TEST_RECORD_BYTES"
#: failure class of a cell stopped by a full disk
DISK_FULL = "disk_full"


class DiskSpaceError(TransientCellError):
    """Not enough free space for the cell's record (before it starts), or the disk filled while it was written."""


def is_disk_full(e: BaseException) -> bool:
    """Whether an error is a full disk or an exhausted quota."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def record_bytes_estimate(cell: Cell, settings: LauncherSettings) -> int:
    """Upper bound of the bytes one attempt of the cell writes (module docstring)."""
    if os.environ.get(NEED_ENV):
        return int(os.environ[NEED_ENV])
    telemetry = settings.telemetry
    limit_s = 60.0 * settings.timeout_min
    samples = 0.0
    if telemetry.enabled:
        streams = cell.gpus_per_node if accelerator_of(cell.hardware) != "cpu" else 1  # CPU ranks: host rows
        samples = limit_s * 1000.0 / float(telemetry.period_ms) * streams * cell.nodes
    steps = telemetry.profile_steps
    ranks = cell.world_size if telemetry.profile_all_ranks else max(1, cell.pp) * cell.nodes
    per_trace = CPU_TRACE_BYTES if accelerator_of(cell.hardware) == "cpu" else TRACE_BYTES
    return int(samples * SAMPLE_BYTES + steps * ranks * per_trace + FIXED_BYTES)


def free_bytes(path: Path) -> int:
    """Free bytes for an unprivileged writer on the file system of ``path`` (its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def check_free_space(cell: Cell, settings: LauncherSettings, folder: Path) -> None:
    """Refuse the cell (:class:`DiskSpaceError`, with the numbers) when ``folder``'s file system has less free
    space than the cell's estimate."""
    need = record_bytes_estimate(cell, settings)
    free = free_bytes(folder)
    if free < need:
        raise DiskSpaceError(f"{DISK_FULL}: {_mib(free)} free on the file system of {folder}, the cell's record "
                             f"needs up to {_mib(need)} (sampler streams over launcher.timeout_min, traces, record); "
                             "free space and run it again")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"
