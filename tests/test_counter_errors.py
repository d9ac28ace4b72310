"""NVML errors in counter readings (negative or all-ones values): dropped, counted, noted; never a glitch, a reset, a
wrap or energy. Checked on a real trace (2x H200 fixture) with injected sentinels against an independent
computation (numpy interpolation over the readings left)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from calorimeter.analysis.window import GpuSamples
from calorimeter.telemetry.convert import load_gpu_samples, tidy_gpu_samples
from calorimeter.telemetry.counters import ALL_ONES_64, counter_trace, infer_counter_width, unwrap_counter
from calorimeter.telemetry.gpu_common import GpuReader, MetricGroup
from calorimeter.telemetry.metadata import UnavailableRegistry
from calorimeter.telemetry.schema import GPU_COUNTERS

FIXTURE = "tests/fixtures/telemetry/h200x2-matmul-50ms"
ONES_32 = 2**32 - 1


def _expected(raw: list[int | None]) -> list[float | None]:
    """Cumulative increase of a monotone series without its errors, computed directly."""
    first = next(v for v in raw if v is not None)
    return [None if v is None else float(v - first) for v in raw]


def _got(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(x) else float(x) for x in values]


CLEAN = [1000, 1100, 1250, 1300, 1450, 1600]


@pytest.mark.parametrize("width", [64, 32])
@pytest.mark.parametrize("where", [[2], [2, 3], [0], [0, 1], [5], [4, 5], [0, 5], [1, 3, 4]],
                         ids=["single", "consecutive", "first", "first-two", "last", "last-two", "both-edges",
                              "scattered"])
@pytest.mark.parametrize("bad", ["all-ones", "negative"])
def test_counter_errors_are_dropped_and_counted(width: int, where: list[int], bad: str) -> None:
    sentinel = (ALL_ONES_64 if width == 64 else ONES_32) if bad == "all-ones" else -1
    raw: list[int | None] = list(CLEAN)
    for i in where:
        raw[i] = sentinel
    values = pd.Series(raw, dtype="float64") if bad == "negative" else pd.array(raw, dtype="UInt64")
    tr = counter_trace(values, width)
    expected = _expected([None if i in where else v for i, v in enumerate(CLEAN)])
    assert _got(tr.cumulative) == expected
    assert tr.errors == len(where) and tr.glitches == 0 and tr.resets == 0 and tr.wraps == 0
    assert tr.invalid is not None and sorted(np.flatnonzero(tr.invalid).tolist()) == sorted(where)
    # the readings kept are exactly the valid ones
    assert not tr.kept[where].any() and tr.kept[[i for i in range(len(CLEAN)) if i not in where]].all()


def test_the_64bit_all_ones_is_an_error_of_any_counter_and_never_sets_the_width() -> None:
    raw = pd.array([100, ALL_ONES_64, ALL_ONES_64, 400], dtype="UInt64")
    assert infer_counter_width(raw) == 32  # the sentinel does not make a 32-bit counter 64-bit
    tr = counter_trace(raw, infer_counter_width(raw))
    assert _got(tr.cumulative) == [0.0, None, None, 300.0] and tr.errors == 2 and tr.wraps == 0
    # a float stream holds 2^64 - 1 as 2^64
    tr = counter_trace([100.0, float(2**64), 300.0], 64)
    assert _got(tr.cumulative) == [0.0, None, 200.0] and tr.errors == 1
    # 2^32 - 1 is a valid reading of a 64-bit counter
    tr = counter_trace(pd.array([ONES_32 - 5, ONES_32, ONES_32 + 7], dtype="UInt64"), 64)
    assert _got(tr.cumulative) == [0.0, 5.0, 12.0] and tr.errors == 0


def test_an_error_next_to_a_wrap_or_reset_does_not_hide_it() -> None:
    m = 2**32
    tr = counter_trace([m - 100, ONES_32, 5, 20], 32)  # the wrap is still seen across the error
    assert _got(tr.cumulative) == [0.0, None, 105.0, 120.0] and tr.wraps == 1 and tr.errors == 1
    tr = counter_trace(pd.array([500, 600, ALL_ONES_64, 5, 10], dtype="UInt64"), 64)  # a real reset stays one
    assert _got(tr.cumulative) == [0.0, 100.0, None, 100.0, 105.0] and tr.resets == 1 and tr.errors == 1
    assert unwrap_counter([-1.0, 10.0, 15.0], 64).tolist()[1:] == [10.0, 15.0]


def _window_truth(t: np.ndarray, raw: np.ndarray, begin: float, end: float, scale: float) -> float:
    """Increase over [begin, end] clipped to the valid readings, by linear interpolation of the raw values."""
    ok = ~np.isnan(raw)
    ts, rs = t[ok], raw[ok]
    b, e = max(begin, ts[0]), min(end, ts[-1])
    return float(np.interp(e, ts, rs) - np.interp(b, ts, rs)) * scale


@pytest.mark.parametrize("gpu", [0, 1])
@pytest.mark.parametrize("pattern", ["single", "consecutive", "window-edges", "trace-edges"])
def test_real_trace_with_injected_sentinels_matches_an_independent_computation(gpu: int, pattern: str) -> None:
    rows = load_gpu_samples(FIXTURE)
    rows = rows[rows.gpu_index == gpu].sort_values("time_s").reset_index(drop=True)
    t = rows.time_s.to_numpy()
    begin, end = t[20], t[-20]
    specs = [c for c in GPU_COUNTERS if c.name in rows and rows[c.name].notna().sum() > 10]
    assert {c.name for c in specs} >= {"energy_millijoule", "pcie_tx_bytes", "nvlink_tx_kib"}
    bad_rows = rows.copy()
    truth: dict[str, float] = {}
    injected = 0
    rng = np.random.default_rng(gpu)
    for c in specs:
        have = np.flatnonzero(rows[c.name].notna().to_numpy())
        inside = have[(t[have] >= begin) & (t[have] <= end)]
        if pattern == "single":
            where = [int(rng.choice(inside))]
        elif pattern == "consecutive":
            k = int(rng.integers(1, len(inside) - 3))
            where = list(inside[k:k + 3])
        elif pattern == "window-edges":  # the first and last readings inside the window, and the ones just outside
            outside = have[(t[have] < begin) | (t[have] > end)]
            where = [inside[0], inside[-1], outside[outside < inside[0]][-1], outside[outside > inside[-1]][0]]
        else:  # the first and last readings of the whole trace
            where = [have[0], have[-1]]
        width = c.counter_bits or infer_counter_width(rows[c.name])
        values = rows[c.name].astype("object")
        for n, i in enumerate(where):
            values.iloc[i] = -1 if n % 2 else (ALL_ONES_64 if width == 64 else ONES_32)
        bad_rows[c.name] = values
        injected += sum(1 for i in where if begin <= t[i] <= end)
        clean = pd.to_numeric(rows[c.name], errors="coerce").to_numpy(dtype=float, copy=True)
        clean[where] = np.nan
        truth[c.tidy] = _window_truth(t, clean, begin, end, c.tidy_scale)
    base = GpuSamples(rows).window_stats(begin, end)
    for frame in (bad_rows, tidy_gpu_samples(bad_rows)):  # the stream as read and the tidy table agree
        gs = GpuSamples(frame)
        for name, value in truth.items():
            assert gs.counter_window(name, begin, end)[0] == pytest.approx(value, rel=1e-12), name
        got = gs.window_stats(begin, end)
        assert got["nvml_errors"] == base["nvml_errors"] + injected
        assert got["counter_glitches"] == 0 and got["counter_resets"] == 0
        assert got["data_quality"] == "good"
        # noted by counter when inside the window; outside it (trace edges) nothing to note
        assert ("energy_millijoule: " in got["quality_notes"]) == (injected > 0)
        assert got["energy_counter_j"] == pytest.approx(base["energy_counter_j"], rel=0.02)  # never 1e16 J


def test_the_sampler_stores_a_negative_counter_reading_as_missing_and_says_why() -> None:
    readings = iter([5000, -1, 5200])
    reader = GpuReader(gpu_index=0, backend="test",
                       groups=[MetricGroup(("energy_millijoule",), lambda: {"energy_millijoule": next(readings)})])
    reg = UnavailableRegistry()
    rows = [reader.read(reg) for _ in range(3)]
    assert [r.get("energy_millijoule") for r in rows] == [5000, None, 5200]
    assert "negative reading -1" in reg.entries[("energy_millijoule", "gpu0")]
