"""Thermal steadiness of a measured window, as the analysis judges it (calorimeter.records.steadiness through
GpuSamples.temperature_drift, the runs table's thermally_steady, the STEADY precondition); the warm-up's side of the
same rule is tests/test_train_steady.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calorimeter.analysis.cell import thermal_steadiness
from calorimeter.analysis.window import GpuSamples
from calorimeter.findings.preconditions import STEADY, meets
from calorimeter.records.steadiness import FIT_MIN_S, drift_c, fit_begin, is_steady


def samples(drift_c_per_min: float, amplitude_c: float = 1.0, start_s: float = 0.0) -> GpuSamples:
    """One GPU on its plateau from ``start_s`` (idle at 35 degC before): +-``amplitude_c`` swings every 8 s, a steady
    drift, 50 ms samples in whole degrees, from t = 0 to 100 s."""
    t = np.arange(0.0, 100.0, 0.05)
    on = 60 + amplitude_c * np.sin(2 * np.pi * t / 8.0) + drift_c_per_min * t / 60
    temp = np.round(np.where(t >= start_s, on, 35.0))
    return GpuSamples(pd.DataFrame({"time_s": t, "gpu_temp_c": temp}), 0.05)


@pytest.mark.parametrize(("drift_c_per_min", "amplitude_c", "steady"), [
    (0.0, 1.0, True),  # a plateau swinging +-1 degC, no drift
    (4.0, 0.0, False),  # a 4 degC/min ramp: 2 degC over 30 s
    (3.0, 0.0, False),  # 3 degC/min: 1 degC over the 20 s window, but 1.5 over the 30 s it is judged on
    (0.5, 1.0, True),  # a slow 0.5 degC/min drift: 0.25 degC over 30 s
])
def test_plateau_ramp_and_slow_drift(drift_c_per_min: float, amplitude_c: float, steady: bool) -> None:
    slope, drift = samples(drift_c_per_min, amplitude_c).temperature_drift(75.0, 95.0)
    assert (drift < 1.0) is steady
    assert slope == pytest.approx(drift_c_per_min, abs=1.0) and drift == pytest.approx(abs(slope) * 30 / 60)


def test_a_short_window_of_a_heating_gpu_is_not_steady() -> None:
    """A 1.6 s window at 17 degC/min drifts 0.45 degC inside itself, yet the die is 8 degC warmer half a minute
    later: the drift is judged over at least 30 s."""
    assert drift_c(17.0, 1.6) == pytest.approx(17.0 * 30 / 60) and not is_steady(drift_c(17.0, 1.6))
    assert drift_c(1.0, 90.0) == pytest.approx(1.5)  # a window longer than 30 s is judged over itself


def test_a_short_window_is_fitted_over_30_s_and_sees_the_warm_up_before_it() -> None:
    """A 5 s window right after load began is fitted from 30 s before its end, which holds the rise: not steady;
    the same window on the plateau is. A window longer than 30 s is fitted over itself."""
    assert fit_begin(70.0, 75.0) == 75.0 - FIT_MIN_S and fit_begin(10.0, 90.0) == 10.0
    rising = samples(0.0, start_s=68.0)
    assert rising.temperature_drift(70.0, 75.0)[1] > 1.0
    assert samples(0.0).temperature_drift(70.0, 75.0)[1] < 1.0
    gap = GpuSamples(pd.DataFrame({"time_s": [70.0, 71.0, 75.0], "gpu_temp_c": [60.0, 60.0, 60.0]}), 0.05)
    assert np.isnan(gap.temperature_drift(70.0, 75.0)[1])  # the readings span 5 s of the 30 s fit: no slope


def test_the_runs_table_judges_the_window_or_falls_back_to_the_runtime_flag() -> None:
    gpus = pd.DataFrame({"temp_avg_c": [60.0, 61.0], "temp_drift_c": [0.4, 0.9]})
    assert thermal_steadiness({"temp_drift_c": 0.9, "warmup_reason": "cap (100 steps or 70 s) before steady"},
                              gpus) == (True, "")
    assert thermal_steadiness({"temp_drift_c": 1.2, "warmup_reason": "steady"}, gpus) == (False, "")
    uncovered = gpus.assign(temp_drift_c=[0.4, np.nan])
    steady, note = thermal_steadiness({"temp_drift_c": np.nan, "warmup_reason": "steady"}, uncovered)
    assert not steady and "do not cover" in note
    steady, note = thermal_steadiness({"warmup_reason": "steady", "warmup_mode": "steady"}, pd.DataFrame())
    assert steady and "warm-up's flag" in note


def test_the_precondition_reads_the_window_and_only_older_tables_the_flag() -> None:
    runs = pd.DataFrame({"status": ["ok"] * 4, "hardware": ["h200"] * 4,
                         "warmup_reason": ["steady", "steady", "cap", "cap"],
                         "thermally_steady": [False, True, True, None]})
    assert list(meets(runs, STEADY)) == [False, True, True, False]
    older = runs.drop(columns="thermally_steady")
    assert list(meets(older, STEADY)) == [True, True, False, False]
    assert "1 °C" in STEADY.name and "30 s" in STEADY.name
