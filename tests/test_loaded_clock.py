"""The SM clock under load (calorimeter.analysis.window.GpuSamples.loaded_average, the runs table's
sm_clock_loaded_avg_mhz); its reading beside the clock findings is in tests/test_findings.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from calorimeter.analysis.window import LOADED_POWER_FRAC, GpuSamples


def stage(limit_w: float | None = 700.0, bubble_share: float = 0.4) -> GpuSamples:
    """A pipeline stage sampled every 50 ms over 60 s: busy at 680 W and 1700 MHz, waiting in its bubble
    (``bubble_share`` of every second) at 250 W and 1950 MHz."""
    t = np.arange(0.0, 60.0, 0.05)
    idle = (t % 1.0) < bubble_share
    frame = pd.DataFrame({"time_s": t, "power_instant_w": np.where(idle, 250.0, 680.0),
                          "sm_clock_mhz": np.where(idle, 1950.0, 1700.0)})
    if limit_w is not None:
        frame["power_limit_w"] = limit_w
    return GpuSamples(frame, 0.05)


def test_the_clock_under_load_leaves_the_bubble_out() -> None:
    g = stage()
    assert g.loaded_average("sm_clock_mhz", 10.0, 50.0) == pytest.approx(1700.0)
    assert g.average("sm_clock_mhz", 10.0, 50.0) == pytest.approx(1800.0, abs=5.0)  # the time average mixes it in
    stats = g.window_stats(10.0, 50.0)
    assert stats["sm_clock_loaded_avg_mhz"] == pytest.approx(1700.0)


def test_the_clock_under_load_is_nan_without_a_limit_a_load_or_coverage() -> None:
    assert math.isnan(stage(limit_w=None).loaded_average("sm_clock_mhz", 10.0, 50.0))  # no limit: no threshold
    assert math.isnan(stage(limit_w=2000.0).loaded_average("sm_clock_mhz", 10.0, 50.0))  # 680 W < 60% of 2000
    assert math.isnan(stage().loaded_average("sm_clock_mhz", 40.0, 100.0))  # samples cover 20 of the 60 s
    assert 680.0 >= LOADED_POWER_FRAC * 700.0 > 250.0
