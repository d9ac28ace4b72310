"""How long a cell warms up and how long it is measured: until the GPU die temperature is steady, then at least a
given duration and step count, decided by all ranks together.

A careful experimenter does not measure a cold GPU: the die heats for tens of seconds under load (on H200s 63% of the
rise came within 4-5 s and 90% within 5-22 s), and the clock, the power and the step time follow it. So with
``warmup: steady`` a cell warms up until the temperature will not move measurably over the window it is about to
measure (:mod:`calorimeter.records.steadiness`, the same definition the analysis judges the measured window by): for
every rank's GPU, the least-squares slope over the last ``steady_window_s`` seconds times the planned measured
duration (the measured steps below at the slowest rank's last step time; at least 30 s) is below the sensor's
resolution, 1 °C;
where ``steady_slope_c_per_min`` is set, every slope must also be at most that (an extra cap; configs written for
the older slope-only rule keep meaning what they did while the planned measured duration is shorter than 60 s
divided by it, where the cap implies the drift rule). At least ``warmup_steps`` steps and ``warmup_min_s`` seconds
run (until every rank has warmed up that long), and the warm-up is capped at ``warmup_max_steps`` steps and
``warmup_max_s`` seconds. Then it measures ``max(measured_steps, ceil(measured_min_s / step time))`` steps, the step
time being the slowest rank's last warm-up step. Every rank
takes part in each decision (one small all-reduce per warm-up step and one after the warm-up, none inside the
measured window), so all ranks stop at the same step.

The temperature comes from the node sampler's stream (every 50 ms, no extra NVML traffic) where it runs, else from
NVML directly once per step. Without a GPU temperature (CPU ranks) the warm-up is the fixed ``warmup_steps`` and the
measurement the fixed ``measured_steps``; the record says so (``warmup.mode_used``).
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.records.paths import RunPaths
from calorimeter.records.provenance import device_info
from calorimeter.records.steadiness import SENSOR_RESOLUTION_C, Readings, drift_c, is_steady, slope_c_per_min
from calorimeter.telemetry.streamio import read_stream

TemperatureSource = Callable[[], Readings]
#: a slope that could not be fitted yet (too early), as a number the ranks' all-reduce can take
_UNFITTED = 1e9


def measured_steps_for(cell: Cell, step_s: float) -> int:
    """Steps measured after a warm-up whose slowest last step took ``step_s``: at least ``measured_steps``, and enough
    for ``measured_min_s`` (none when it is 0 or the step time is unknown)."""
    need = math.ceil(cell.measured_min_s / step_s) if cell.measured_min_s > 0 and step_s > 0 else 0
    return max(cell.measured_steps, need)


def steady_enough(cell: Cell, slope_c_per_min: float, step_s: float) -> tuple[bool, float]:
    """(whether to stop warming up, the drift in °C) for the largest |slope| over the GPUs, at the slowest rank's
    step time: the drift over the planned measured duration below the sensor's resolution, and the slope within
    ``steady_slope_c_per_min`` where that is set. A slope not fitted yet (NaN) is not steady."""
    drift = drift_c(slope_c_per_min, measured_steps_for(cell, step_s) * step_s)
    cap = cell.steady_slope_c_per_min
    return is_steady(drift) and (cap is None or abs(slope_c_per_min) <= cap), drift


def sampler_stream_source(out_dir: Path, nvml_index: int) -> TemperatureSource:
    """Readings of one GPU from this host's node sampler stream in the run folder ``out_dir``
    (:class:`calorimeter.records.paths.RunPaths`; the stream is found through the sampler metadata's hostname; empty
    until it appears)."""
    host = socket.gethostname()
    found: list[Path] = []

    def stream() -> Path | None:
        if not found:
            for meta in (m for node in RunPaths(Path(out_dir)).nodes() for m in sorted(node.glob("sampler-*.json"))):
                try:
                    m = json.loads(meta.read_text())
                except (OSError, ValueError):
                    continue
                if m.get("hostname") == host and (m.get("files") or {}).get("gpu_stream"):
                    found.append(meta.parent / m["files"]["gpu_stream"])
        return found[0] if found else None

    def read() -> Readings:
        path = stream()
        if path is None or not path.is_file():
            return []
        table = read_stream(path).table
        if table.num_rows == 0 or "gpu_temp_c" not in table.column_names:
            return []
        df = table.select(["time_s", "gpu_index", "gpu_temp_c"]).to_pandas()
        df = df[(df["gpu_index"] == nvml_index) & df["gpu_temp_c"].notna() & (df["gpu_temp_c"] >= 0)]
        return list(zip(df["time_s"].astype(float), df["gpu_temp_c"].astype(float), strict=True))

    return read


def nvml_source(nvml_index: int) -> TemperatureSource | None:
    """One NVML reading of the GPU per call, accumulated (when no sampler runs); None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)
        pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    except Exception:  # noqa: BLE001 - no NVML: no temperature
        return None
    readings: Readings = []

    def read() -> Readings:
        readings.append((time.time(), float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))))
        return readings

    return read


def temperature_source(out_dir: Path, device: Any) -> tuple[TemperatureSource | None, str]:
    """This rank's GPU temperature readings: the node sampler's stream where it has them, else NVML once per call;
    (None, why) on a CPU rank or without NVML."""
    if getattr(device, "type", "cpu") != "cuda":
        return None, "no GPU temperature on a CPU rank"

    info = device_info(str(device))
    idx = info.get("nvml_index")
    if idx is None:
        return None, f"no NVML index for {device}: {info.get('unavailable', 'unknown')}"
    stream, direct = sampler_stream_source(out_dir, int(idx)), nvml_source(int(idx))

    def read() -> Readings:
        return stream() or (direct() if direct is not None else [])

    return read, f"GPU {idx}: node sampler stream (NVML once per step while the stream has no sample)"


def _alone(values: np.ndarray) -> np.ndarray:
    return values


@dataclass
class SteadyState:
    """The phases of one rank's steps: warm-up until steady (or fixed), then the measured steps, then the profiled
    ones. Iterate over it for the phase of each step and call :meth:`done` after each step, on every rank.

    Args:
        cell: The cell (its ``warmup``, ``warmup_*``, ``steady_*`` and ``measured_*`` settings).
        source: This rank's GPU temperature readings (None: none, e.g. a CPU rank).
        source_note: Where the readings come from, or why there are none.
        agree_min: Collective: element-wise minimum over all ranks (identity for a single process).
        profile_steps: Profiled steps after the measured ones.
    """

    cell: Cell
    source: TemperatureSource | None
    source_note: str
    agree_min: Callable[[np.ndarray], np.ndarray] = _alone
    profile_steps: int = 0
    steps: int = 0
    slope: float = float("nan")
    max_slope: float = float("nan")
    drift: float = float("nan")
    reason: str = ""
    warmup_s: float = 0.0
    measured: int = 0
    step_times: list[float] = field(default_factory=list)
    _started_s: float = 0.0
    _has_temperature: bool = False

    @property
    def mode_used(self) -> str:
        """``steady`` or ``fixed`` (asked for, or the fallback when a rank has no GPU temperature)."""
        return "steady" if self.cell.warmup == "steady" and self._has_temperature else "fixed"

    def __iter__(self):  # noqa: ANN204 - a generator of phase names
        self._started_s = time.time()
        self._has_temperature = bool(self.agree_min(np.array([1.0 if self.source else 0.0]))[0])
        if not self._has_temperature:
            self.source = None
        while self._warm_more():
            yield "warmup"
        self.warmup_s = time.time() - self._started_s
        self.measured = self._measured_steps()
        for _ in range(self.measured):
            yield "measured"
        for _ in range(self.profile_steps):
            yield "profiled"

    def done(self, step_time_s: float) -> None:
        """Report the step that just ended (its device-synchronised duration)."""
        self.step_times.append(step_time_s)

    def _warm_more(self) -> bool:
        """Before each warm-up step: True to run one more (the same answer on every rank)."""
        c = self.cell
        self.steps = len(self.step_times)
        if self.mode_used == "fixed":
            self.reason = "fixed" if c.warmup == "fixed" else f"fixed: {self.source_note}"
            return self.steps < c.warmup_steps
        if self.steps == 0:
            return True
        now = time.time()
        self.slope = slope_c_per_min(self.source() if self.source else [], now, c.steady_window_s)
        capped = 1.0 if self.steps >= c.warmup_max_steps or now - self._started_s >= c.warmup_max_s else 0.0
        young = 1.0 if now - self._started_s < c.warmup_min_s else 0.0
        local = abs(self.slope) if self.slope == self.slope else _UNFITTED
        # the largest over ranks (minus the minimum of the negatives): |slope|, capped, the last step's time, young
        agreed = -self.agree_min(np.array([-local, -capped, -self.step_times[-1], -young]))
        self.max_slope = float(agreed[0]) if agreed[0] < _UNFITTED else float("nan")
        any_capped = bool(agreed[1] == 1.0)
        all_steady, self.drift = steady_enough(c, self.max_slope, float(agreed[2]))
        if any_capped:
            self.reason = (f"cap ({c.warmup_max_steps} steps or {c.warmup_max_s:g} s) before steady"
                           if not all_steady else "steady")
            return False
        if self.steps < c.warmup_steps or agreed[3] == 1.0:  # too few steps, or some rank short of warmup_min_s
            return True
        if all_steady:
            self.reason = "steady"
            return False
        return True

    def _measured_steps(self) -> int:
        """At least ``measured_steps``; with a GPU temperature (a GPU rank) also enough steps for ``measured_min_s`` at
        the slowest rank's last warm-up step time (the same on every rank)."""
        c = self.cell
        if not self._has_temperature or c.measured_min_s <= 0:
            return c.measured_steps
        last = self.step_times[-1] if self.step_times else 0.0
        return measured_steps_for(c, -float(self.agree_min(np.array([-last]))[0]))

    def record(self) -> JsonObject:
        """What was decided and why (goes into the rank's result and the cell's record)."""
        c = self.cell
        return {"mode": c.warmup, "mode_used": self.mode_used, "reason": self.reason, "steps": self.steps,
                "seconds": self.warmup_s, "final_slope_c_per_min": None if math.isnan(self.slope) else self.slope,
                "final_max_slope_c_per_min": None if math.isnan(self.max_slope) else self.max_slope,
                "final_drift_c": None if math.isnan(self.drift) else self.drift,
                "drift_threshold_c": SENSOR_RESOLUTION_C, "slope_threshold_c_per_min": c.steady_slope_c_per_min,
                "window_s": c.steady_window_s,
                "max_steps": c.warmup_max_steps, "max_s": c.warmup_max_s, "min_s": c.warmup_min_s,
                "temperature_source": self.source_note,
                "measured_steps": self.measured, "measured_min_s": c.measured_min_s}


def steady_schedule(cell: Cell, out_dir: Path, device: Any, profile_steps: int = 0) -> SteadyState:
    """The schedule of this rank's steps (see :class:`SteadyState`), with torch.distributed as the collective."""
    import torch
    import torch.distributed as dist

    def agree_min(values: np.ndarray) -> np.ndarray:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device if getattr(device, "type", "") == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return t.cpu().numpy()

    source, note = temperature_source(out_dir, device)
    return SteadyState(cell, source, note, agree_min, profile_steps)
