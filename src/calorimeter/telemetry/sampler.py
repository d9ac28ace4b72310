"""The node sampler loop (run as ``python -m calorimeter.telemetry.sampler``).

One process per node reads every GPU and the host every ``period_s`` and streams the samples to
``gpu-<label>.arrows`` and ``host-<label>.arrows``; ``sampler-<label>.json`` next to them
says what was sampled and which metrics are unavailable and why. It stops cleanly on
SIGTERM/SIGINT/SIGHUP, when ``duration_s`` has elapsed, or when its parent process disappears.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import math
import os
import platform
import signal
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.records.atomic import write_json_atomic
from calorimeter.telemetry.gpu_common import GpuReader, record_all_unavailable
from calorimeter.telemetry.gpu_discovery import open_gpu_readers
from calorimeter.telemetry.host import HostReader
from calorimeter.telemetry.metadata import UnavailableRegistry
from calorimeter.telemetry.schema import GPU_METRICS, GPU_SCHEMA, HOST_SCHEMA
from calorimeter.telemetry.streamio import ChunkedStreamWriter

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def default_label() -> str:
    """A sampler run's label, used in its file names: ``<UTC time>_<host>_<pid>``."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}_{socket.gethostname().split('.')[0]}_{os.getpid()}"


@dataclass(frozen=True)
class SamplerPaths:
    """Files of one sampler run in ``out_dir``."""

    out_dir: Path
    label: str

    @property
    def gpu_stream(self) -> Path:
        """Per-GPU samples (Arrow IPC stream)."""
        return self.out_dir / f"gpu-{self.label}.arrows"

    @property
    def host_stream(self) -> Path:
        """Host samples, long format (Arrow IPC stream)."""
        return self.out_dir / f"host-{self.label}.arrows"

    @property
    def metadata(self) -> Path:
        """Sampler metadata JSON."""
        return self.out_dir / f"sampler-{self.label}.json"

    @property
    def log(self) -> Path:
        """stdout/stderr of the sampler process."""
        return self.out_dir / f"sampler-{self.label}.log"


@dataclass
class SamplerConfig:
    """Settings of one sampler run.

    Attributes:
        out_dir: Directory of the node's telemetry files (created).
        period_s: Sampling period (the sweep's ``telemetry.period_ms``; 10 ms works).
        label: The run's label (file name part); default :func:`default_label`.
        flush_interval_s: Longest time samples stay in memory (must be <= 1 s).
        parent_pid: Stop when this process is no longer our parent (None: do not watch).
        duration_s: Stop after this long (None: until signalled).
        gpus: Read GPUs (False: host only).
        all_gpus: Ignore ``CUDA_VISIBLE_DEVICES`` & co so that every GPU of the node is read.
        host_every: Read host metrics every n-th sample.
        slow_period_s: Period of the expensive GPU reads (energy counter, PCIe byte counters);
            GPUs are staggered so that each sample reads the slow groups of only some GPUs.
            0 = read them every sample.
    """

    out_dir: Path
    period_s: float
    label: str = field(default_factory=default_label)
    flush_interval_s: float = 0.5
    parent_pid: int | None = None
    duration_s: float | None = None
    gpus: bool = True
    all_gpus: bool = True
    host_every: int = 1
    slow_period_s: float = 0.1

    @property
    def slow_every(self) -> int:
        """Samples between two slow reads of one GPU."""
        return max(1, round(self.slow_period_s / self.period_s)) if self.slow_period_s > 0 else 1

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if not 0 < self.period_s <= 60:
            raise ValueError(f"period_s must be in (0, 60], got {self.period_s}")
        if not 0 < self.flush_interval_s <= 1.0:
            raise ValueError(f"flush_interval_s must be in (0, 1], got {self.flush_interval_s}")
        if self.host_every < 1:
            raise ValueError("host_every must be >= 1")


class _StopFlag:
    def __init__(self) -> None:
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


def _set_parent_death_signal() -> bool:
    """Ask Linux to send SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG); best effort."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        return libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _loop_stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(values),
        "p50": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(math.ceil(0.99 * len(ordered))) - 1)],
        "max": ordered[-1],
    }


class Sampler:
    """Owns the readers and the stream writers of one sampler run.

    Args:
        config: The run settings.
    """

    def __init__(self, config: SamplerConfig):
        self.config = config
        self.paths = SamplerPaths(config.out_dir, config.label)
        self.registry = UnavailableRegistry()
        self.gpu_readers: list[GpuReader] = []
        self.gpu_info: JsonObject = {}
        self.host = HostReader()
        self.stop = _StopFlag()
        self.started_time_s = time.time()
        self.n_samples = 0
        self.n_missed = 0
        #: a stream or metadata write failed (full disk): sampling stopped, the streams keep what they hold
        self.write_failed = False
        self.loop_s: list[float] = []
        self._meta_entries = -1

    def open(self) -> None:
        """Probe GPUs and host, open the streams and write the first metadata."""
        self.config.out_dir.mkdir(parents=True, exist_ok=True)
        if self.config.gpus:
            if self.config.all_gpus:
                for var in _VISIBILITY_VARS:
                    os.environ.pop(var, None)

            self.gpu_readers, self.gpu_info = open_gpu_readers(self.registry)
        else:
            self.gpu_info = {"gpu_backend": None, "gpu_error": "GPU sampling disabled (gpus=False)"}

            record_all_unavailable(self.registry, "all", "GPU sampling disabled by configuration")
        self.host.probe(self.registry)
        flush = self.config.flush_interval_s
        self.gpu_writer = ChunkedStreamWriter(self.paths.gpu_stream, GPU_SCHEMA, flush)
        self.host_writer = ChunkedStreamWriter(self.paths.host_stream, HOST_SCHEMA, flush)
        self.write_metadata("running")

    def metadata(self, status: str) -> JsonObject:
        """The metadata JSON content."""
        return {
            "format_version": FORMAT_VERSION,
            "status": status,
            "stop_reason": self.stop.reason,
            "label": self.config.label,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "parent_pid": self.config.parent_pid,
            "python": platform.python_version(),
            "started_time_s": self.started_time_s,
            "period_s": self.config.period_s,
            "flush_interval_s": self.config.flush_interval_s,
            "host_every": self.config.host_every,
            "slow_period_s": self.config.slow_period_s,
            "slow_every": self.config.slow_every,
            "clock": "time_s = time.time() (wall clock, same as step markers); monotonic_s = time.monotonic()",
            "files": {
                "gpu_stream": self.paths.gpu_stream.name,
                "host_stream": self.paths.host_stream.name,
            },
            "gpu_columns": {c.name: c.source for c in GPU_METRICS},
            "counter_bits": {c.name: c.counter_bits for c in GPU_METRICS if c.counter_bits is not None},
            "gpus": [{"gpu_index": r.gpu_index, "backend": r.backend, **r.info} for r in self.gpu_readers],
            "gpu_library": self.gpu_info,
            "host": self.host.info
            | {"sensors": [{"metric": s.metric, "source": s.source, "path": str(s.path)} for s in self.host.sensors]},
            "unavailable": self.registry.to_json(),
            "stats": {
                "n_samples": self.n_samples,
                "n_missed_deadlines": self.n_missed,
                "loop_s": _loop_stats(self.loop_s),
                "gpu_call_ms": {r.device: r.call_stats() for r in self.gpu_readers},
            },
        }

    def write_metadata(self, status: str) -> None:
        """Rewrite the metadata file atomically."""
        write_json_atomic(self.paths.metadata, self.metadata(status), fsync=False)  # no sample waits on the disk
        self._meta_entries = len(self.registry.entries)

    def sample_once(self) -> float:
        """Read every GPU and (every ``host_every`` samples) the host; buffer the rows.

        Returns:
            Time spent in this sample, in seconds.
        """
        t_begin = time.perf_counter()
        for reader in self.gpu_readers:
            r0 = time.perf_counter()
            row_time = time.time()
            row_mono = time.monotonic()
            every = self.config.slow_every
            row = reader.read(self.registry, read_slow=(self.n_samples + reader.gpu_index) % every == 0)
            row.update(time_s=row_time, monotonic_s=row_mono, gpu_index=reader.gpu_index)
            row["read_s"] = time.perf_counter() - r0
            self.gpu_writer.append(row)
        gpu_read_s = time.perf_counter() - t_begin
        now_time, now_mono = time.time(), time.monotonic()
        host_rows = self.host.read() if self.n_samples % self.config.host_every == 0 else []
        loop_s = time.perf_counter() - t_begin
        for metric, source, value in host_rows:
            self.host_writer.append(
                {"time_s": now_time, "monotonic_s": now_mono, "metric": metric, "source": source, "value": value}
            )
        for metric, value in (("sampler_loop_s", loop_s), ("sampler_gpu_read_s", gpu_read_s)):
            self.host_writer.append(
                {"time_s": now_time, "monotonic_s": now_mono, "metric": metric, "source": "sampler", "value": value}
            )
        self.n_samples += 1
        self.loop_s.append(loop_s)
        return loop_s

    def run(self) -> str:
        """Sample until told to stop; close the streams and write the final metadata.

        Returns:
            The stop reason.
        """
        cfg = self.config
        start = time.monotonic()
        next_due = start
        try:
            while self.stop.reason is None:
                self.sample_once()
                now = time.monotonic()
                try:
                    self.gpu_writer.maybe_flush(now)
                    self.host_writer.maybe_flush(now)
                    if len(self.registry.entries) != self._meta_entries:
                        self.write_metadata("running")
                except OSError as e:  # a full disk: keep what the streams hold, stop sampling, never crash
                    self.stop.set(f"write failed: {e.strerror or e} ({e.filename or 'stream'})")
                    self.write_failed = True
                    break
                if cfg.parent_pid is not None and os.getppid() != cfg.parent_pid:
                    self.stop.set("parent process exited")
                    break
                if cfg.duration_s is not None and now - start >= cfg.duration_s:
                    self.stop.set("duration reached")
                    break
                next_due += cfg.period_s
                if now > next_due:  # late: skip the missed ticks instead of bursting
                    skipped = math.ceil((now - next_due) / cfg.period_s)
                    self.n_missed += skipped
                    next_due += skipped * cfg.period_s
                time.sleep(max(0.0, next_due - time.monotonic()))
        finally:
            if self.write_failed:  # write nothing more: the streams end with what was written (a torn tail at most)
                self.gpu_writer.abandon()
                self.host_writer.abandon()
                with contextlib.suppress(OSError):
                    self.write_metadata("stopped")
            else:
                self.gpu_writer.close()
                self.host_writer.close()
                self.write_metadata("stopped")
        return self.stop.reason or "unknown"


def run_sampler(config: SamplerConfig) -> str:
    """Run a sampler in this process until it stops (signals are handled here).

    Args:
        config: The run settings.

    Returns:
        The stop reason.
    """
    sampler = Sampler(config)

    def on_signal(signum: int, _frame: Any) -> None:
        sampler.stop.set(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not in the main thread
            signal.signal(sig, on_signal)
    sampler.open()
    if config.parent_pid is not None and os.getppid() != config.parent_pid:
        sampler.stop.set("parent process exited before sampling started")
    return sampler.run()


def _parse_args(argv: list[str] | None) -> SamplerConfig:
    p = argparse.ArgumentParser(prog="python -m calorimeter.telemetry.sampler", description=__doc__)
    p.add_argument("--out-dir", required=True, type=Path)
    p.add_argument("--label", default=None)
    p.add_argument("--period-s", type=float, required=True)
    p.add_argument("--flush-interval-s", type=float, default=0.5)
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.add_argument("--duration-s", type=float, default=None)
    p.add_argument("--no-gpus", action="store_true", help="host metrics only")
    p.add_argument("--respect-visible-devices", action="store_true", help="keep CUDA_VISIBLE_DEVICES")
    p.add_argument("--host-every", type=int, default=1)
    p.add_argument("--slow-period-s", type=float, default=0.1, help="energy/PCIe counter period (0: every sample)")
    a = p.parse_args(argv)
    return SamplerConfig(
        out_dir=a.out_dir,
        label=a.label or default_label(),
        period_s=a.period_s,
        flush_interval_s=a.flush_interval_s,
        parent_pid=a.parent_pid,
        duration_s=a.duration_s,
        gpus=not a.no_gpus,
        all_gpus=not a.respect_visible_devices,
        host_every=a.host_every,
        slow_period_s=a.slow_period_s,
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = _parse_args(argv)
    if config.parent_pid is not None:
        _set_parent_death_signal()
    reason = run_sampler(config)
    log.info("sampler stopped: %s", reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
