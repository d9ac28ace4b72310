"""Start and stop the node sampler as a separate process (from local rank 0)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import calorimeter
from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.sampler import SamplerPaths, default_label


class NodeSampler:
    """Handle on a running sampler process.

    Attributes:
        process: The ``subprocess.Popen`` of the sampler.
        paths: Its files.
    """

    def __init__(self, process: subprocess.Popen[bytes], paths: SamplerPaths):
        self.process = process
        self.paths = paths

    @property
    def pid(self) -> int:
        """The sampler's process id."""
        return self.process.pid

    def metadata(self) -> JsonObject | None:
        """Current metadata JSON, or None before the sampler wrote it."""
        try:
            return json.loads(self.paths.metadata.read_text())
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout_s: float = 60.0) -> JsonObject:
        """Block until the sampler has probed its sensors and opened its streams.

        Args:
            timeout_s: Give up after this long.

        Returns:
            The metadata written at start.

        Raises:
            RuntimeError: The sampler exited or did not get ready in time.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            meta = self.metadata()
            if meta is not None:
                return meta
            if self.process.poll() is not None:
                raise RuntimeError(f"sampler exited with {self.process.returncode}; see {self.paths.log}")
            time.sleep(0.02)
        raise RuntimeError(f"sampler not ready after {timeout_s} s; see {self.paths.log}")

    def stop(self, timeout_s: float = 10.0) -> int:
        """Ask the sampler to stop (SIGTERM), wait; SIGKILL if it does not exit in time.

        Returns:
            The sampler's exit code.
        """
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the sampler (crash simulation) and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def __enter__(self) -> NodeSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_node_sampler(
    out_dir: str | Path,
    period_s: float,
    flush_interval_s: float = 0.5,
    *,
    label: str | None = None,
    gpus: bool = True,
    all_gpus: bool = True,
    duration_s: float | None = None,
    host_every: int = 1,
    slow_period_s: float = 0.1,
    wait_ready: bool = True,
    stop_at_exit: bool = True,
    python: str = sys.executable,
) -> NodeSampler:
    """Start the node sampler as a child process that dies with this one.

    The child watches this process's pid (and asks the kernel for SIGTERM on parent death), so
    it stops when the job dies even without :meth:`NodeSampler.stop`.

    Args:
        out_dir: Directory for the node's files (created).
        period_s: Sampling period in seconds (the sweep's ``telemetry.period_ms``; 0.01 works).
        flush_interval_s: Longest time samples stay in memory (<= 1 s).
        label: The run's file-name part; default ``<UTC time>_<host>_<pid>``.
        gpus: Sample GPUs (False: host only).
        all_gpus: Sample every GPU of the node, ignoring ``CUDA_VISIBLE_DEVICES``.
        duration_s: Stop by itself after this long.
        host_every: Read host metrics every n-th sample.
        slow_period_s: Period of the expensive GPU reads (energy and PCIe counters); 0 = every sample.
        wait_ready: Block until the sampler has written its metadata.
        stop_at_exit: Register an ``atexit`` handler that stops it.
        python: Interpreter for the child.

    Returns:
        A :class:`NodeSampler`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = SamplerPaths(out, label or default_label())
    cmd = [
        python, "-m", "calorimeter.telemetry.sampler",
        "--out-dir", str(out), "--label", paths.label,
        "--period-s", repr(period_s), "--flush-interval-s", repr(flush_interval_s),
        "--parent-pid", str(os.getpid()), "--host-every", str(host_every), "--slow-period-s", repr(slow_period_s),
    ]  # fmt: skip
    if duration_s is not None:
        cmd += ["--duration-s", repr(duration_s)]
    if not gpus:
        cmd.append("--no-gpus")
    if not all_gpus:
        cmd.append("--respect-visible-devices")
    env = dict(os.environ)
    pkg_root = str(Path(calorimeter.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    with open(paths.log, "ab") as log_fh:
        proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    handle = NodeSampler(proc, paths)
    if stop_at_exit:
        atexit.register(handle.stop)
    if wait_ready:
        try:
            handle.wait_ready()
        except RuntimeError:
            handle.kill()
            raise
    return handle
