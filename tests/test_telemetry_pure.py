"""Pure functions of the telemetry package: reason names, counters, the GPU reader's groups."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pynvml
import pytest

from calorimeter.telemetry import (
    CLOCK_EVENT_REASON_BITS,
    counter_trace,
    decode_clock_event_reasons,
    infer_counter_width,
    reason_flags,
    unwrap_counter,
)
from calorimeter.telemetry.reasons import ACCUMULATED_REASON_FIELDS


# ---- clock-event reasons -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x24, ["sw_power_cap", "sw_thermal_slowdown"]),  # 0x20 + 0x04
        (0x48, ["hw_slowdown", "hw_thermal_slowdown"]),  # 0x40 + 0x08
        (0x80, ["hw_power_brake_slowdown"]),
        (0x112, ["applications_clocks_setting", "sync_boost", "display_clock_setting"]),  # 0x100+0x10+0x2
        (0x1FF, list(decode_clock_event_reasons(0x1FF))),
    ],
)
def test_decode_reasons(mask: int, expected: list[str]) -> None:
    assert decode_clock_event_reasons(mask) == expected


def test_reason_names_come_from_pynvml() -> None:
    # every bit pynvml names is decoded, under the snake-case form of pynvml's constant
    assert CLOCK_EVENT_REASON_BITS[pynvml.nvmlClocksEventReasonSwPowerCap] == "sw_power_cap"
    assert CLOCK_EVENT_REASON_BITS[pynvml.nvmlClocksThrottleReasonBoardLimit] == "board_limit"
    assert sum(CLOCK_EVENT_REASON_BITS) == pynvml.nvmlClocksThrottleReasonAll
    # accumulated-time fields are matched to their bit by name (THERM_SLOWDOWN is the ThermalSlowdown bit)
    assert ACCUMULATED_REASON_FIELDS["sw_thermal_slowdown"] == pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
    assert ACCUMULATED_REASON_FIELDS["sw_power_cap"] == pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    assert set(ACCUMULATED_REASON_FIELDS) == {"sw_power_cap", "sync_boost", "sw_thermal_slowdown",
                                              "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def test_decode_reasons_unknown_and_missing() -> None:
    assert len(decode_clock_event_reasons(0x1FF)) == 9
    assert decode_clock_event_reasons(0x804) == ["sw_power_cap", "unknown_0x800"]
    assert decode_clock_event_reasons(None) == []
    assert reason_flags(0x4)["sw_power_cap"] is True and reason_flags(0x4)["gpu_idle"] is False
    assert reason_flags(None)["gpu_idle"] is None


# ---- counters ------------------------------------------------------------------------------------
def test_counter_wrap_32bit() -> None:
    m = 2**32
    raw = [m - 100, m - 10, 5, 20]  # wraps between 2nd and 3rd sample: +10 then +5
    tr = counter_trace(raw, 32)
    assert tr.cumulative.tolist() == [0.0, 90.0, 105.0, 120.0] and tr.wraps == 1
    assert unwrap_counter(raw, 32).tolist() == [m - 100, m - 10, m + 5, m + 20]


def test_counter_wrap_with_gap_and_modulus() -> None:
    raw = [10.0, np.nan, 2.0, 7.0]  # modulus 16: 10 -> 2 is +8, then +5
    out = unwrap_counter(raw, modulus=16)
    assert out[0] == 10.0 and math.isnan(out[1]) and out[2] == 18.0 and out[3] == 23.0
    assert infer_counter_width([1.0, 2.0**32 - 1]) == 32
    assert infer_counter_width([2.0**33]) == 64
    assert unwrap_counter([], 64).size == 0


@pytest.mark.parametrize(
    ("raw", "cumulative", "glitches", "resets"),
    [
        ([100, 200, 150, 300], [0, 100, None, 200], 1, 0),  # a dip (e.g. a stale reading): dropped
        ([100, 200, 10**18, 300, 400], [0, 100, None, 200, 300], 1, 0),  # a spike: dropped
        ([100, 200, 5, 10], [0, 100, 100, 105], 0, 1),  # a reset: a new segment, nothing added across the cut
        ([100, None, 300, 400], [0, None, 200, 300], 0, 0),  # missing readings stay missing
    ],
)
def test_64bit_counter_decrease_is_a_glitch_or_reset_never_a_wrap(raw, cumulative, glitches, resets) -> None:
    tr = counter_trace(pd.array(raw, dtype="UInt64"), 64)
    got = [None if math.isnan(x) else x for x in tr.cumulative]
    assert got == cumulative and tr.glitches == glitches and tr.resets == resets and tr.wraps == 0
    assert np.nanmax(tr.cumulative) < 2**40  # 2**64 is never added


def test_uint64_readings_keep_full_precision() -> None:
    # readings above 2**53 differ by 1 mJ: float64 alone would lose them
    base = 2**60
    tr = counter_trace(pd.array([base, base + 1, base + 3], dtype="UInt64"), 64)
    assert tr.cumulative.tolist() == [0.0, 1.0, 3.0]


def test_gpu_reader_slow_groups_and_failures() -> None:
    from calorimeter.telemetry.gpu_common import GpuReader, MetricGroup, Unavailable
    from calorimeter.telemetry.metadata import UnavailableRegistry

    def broken() -> dict:
        raise RuntimeError("Not Supported")

    r = GpuReader(
        gpu_index=3,
        backend="fake",
        groups=[
            MetricGroup(("power_instant_w",), lambda: {"power_instant_w": 500.0}),
            MetricGroup(("energy_mj",), lambda: {"energy_mj": 7}, slow=True),
            MetricGroup(
                ("hbm_temp_c", "gpu_temp_c"), lambda: {"hbm_temp_c": Unavailable("no sensor"), "gpu_temp_c": 60.0}
            ),
            MetricGroup(("nvlink_tx_kib",), broken),
        ],
    )
    reg = UnavailableRegistry()
    r.probe(reg)
    assert reg.entries == {("hbm_temp_c", "gpu3"): "no sensor", ("nvlink_tx_kib", "gpu3"): "Not Supported"}
    assert r.groups[3].disabled and not r.groups[2].disabled
    assert r.read(reg, read_slow=False) == {"power_instant_w": 500.0, "gpu_temp_c": 60.0}
    assert r.read(reg) == {"power_instant_w": 500.0, "energy_mj": 7, "gpu_temp_c": 60.0}
    assert r.call_stats()["energy_mj"]["calls"] == 2  # probe + one slow read


def test_nvidia_reader_reads_accumulated_throttle_times_with_the_slow_counters() -> None:
    """A fake NVML (pynvml's real constants, made-up values) checks which fields the reader asks for and how."""
    from types import SimpleNamespace

    from calorimeter.telemetry.gpu_nvidia import make_nvidia_reader
    from calorimeter.telemetry.metadata import UnavailableRegistry
    from calorimeter.telemetry.reasons import accumulated_column

    asked: list[list] = []

    def field_values(_h, ids):
        asked.append(list(ids))
        out = []
        for fid in ids:
            f = fid[0] if isinstance(fid, tuple) else fid
            v = SimpleNamespace(ullVal=10**12 + f, dVal=0.0, uiVal=0, ulVal=0, sllVal=0, siVal=0, usVal=0)
            bad = f == pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST  # e.g. an older driver
            out.append(SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED if bad else pynvml.NVML_SUCCESS,
                                       valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, value=v))
        return out

    nv = SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml) if k.isupper() or k.startswith("NVMLError")})
    nv.NVMLError, nv.nvmlDeviceGetFieldValues = pynvml.NVMLError, field_values
    for name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID"):
        setattr(nv, name, lambda _h: "x")
    zgpu = SimpleNamespace(handle=object(), gpu_index=0, supports_get_total_energy_consumption=lambda: True,
                           get_total_energy_consumption=lambda: 5)
    reader = make_nvidia_reader(zgpu, nv)
    group = next(g for g in reader.groups if accumulated_column("sw_power_cap") in g.names)
    assert group.slow and group.names == tuple(accumulated_column(r) for r in ACCUMULATED_REASON_FIELDS)
    reg = UnavailableRegistry()
    values = reader._call(group, reg)
    assert asked[-1] == list(ACCUMULATED_REASON_FIELDS.values())
    field = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    assert values[accumulated_column("sw_power_cap")] == 10**12 + field  # uint64 ns, as read
    assert (accumulated_column("sync_boost"), "gpu0") in reg.entries  # unsupported: recorded with NVML's reason


def test_the_one_device_timer_times_each_call_and_a_batch_on_cpu() -> None:
    """telemetry/timer.py (used by the attention probe, the collectives sweep, the calibration load and the
    benchmarks): warm-up calls are not timed, each timed call gets its own time, a batch is timed as a whole."""
    import time

    import torch

    from calorimeter.telemetry.timer import time_batch, time_calls

    calls = []

    def work() -> None:
        calls.append(1)
        time.sleep(0.002)

    times = time_calls(work, torch.device("cpu"), reps=3, warmup=2)
    assert len(calls) == 5 and len(times) == 3 and all(0.002 <= t < 0.5 for t in times)
    assert 0.006 <= time_batch(work, torch.device("cpu"), 3) < 1.0 and len(calls) == 8
