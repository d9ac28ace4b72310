"""The configs table: mean and 95% t-interval over repetitions, checked against a hand computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from calorimeter.analysis.repeats import configs_table


def runs() -> pd.DataFrame:
    rows = []
    for rep, it in enumerate((1.00, 1.02, 0.97)):
        rows.append({"cell_id": "a" + (f"_r{rep}" if rep else ""), "config_id": "a", "repeat": rep, "status": "ok",
                     "model": "m", "iteration_time_s": it, "temp_peak_c": 60.0, "data_quality": "good"})
    rows.append({"cell_id": "a_r3", "config_id": "a", "repeat": 3, "status": "oom", "model": "m",
                 "iteration_time_s": np.nan, "temp_peak_c": np.nan, "data_quality": ""})
    rows.append({"cell_id": "b", "config_id": "b", "repeat": 0, "status": "ok", "model": "m",
                 "iteration_time_s": 2.0, "temp_peak_c": 70.0, "data_quality": "poor"})
    old = {"cell_id": "c", "status": "ok", "model": "m", "iteration_time_s": 3.0}  # a record from before repeats
    return pd.concat([pd.DataFrame(rows), pd.DataFrame([old])], ignore_index=True)


def test_mean_and_t_interval_by_hand() -> None:
    cfg = configs_table(runs()).set_index("config_id")
    a = cfg.loc["a"]
    assert (a["n_planned"], a["n_repeats"], a["statuses"]) == (4, 3, "ok,oom")
    x = [1.00, 1.02, 0.97]
    mean, sd = sum(x) / 3, math.sqrt(sum((v - sum(x) / 3) ** 2 for v in x) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert a["iteration_time_s_mean"] == pytest.approx(mean)
    assert (a["iteration_time_s_ci95_low"], a["iteration_time_s_ci95_high"]) == pytest.approx((mean - half,
                                                                                               mean + half))
    assert a["iteration_time_s_ci95_rel"] == pytest.approx(half / mean)
    # a whole-degree sensor reading the same value three times: the quantization variance 1/12, not a zero width
    q = 4.302652729911275 * math.sqrt(1 / 12 / 3)
    assert a["temp_peak_c_ci95_high"] - a["temp_peak_c_ci95_low"] == pytest.approx(2 * q)
    b = cfg.loc["b"]
    assert b["n_repeats"] == 1 and b["iteration_time_s_mean"] == 2.0 and math.isnan(b["iteration_time_s_ci95_low"])
    assert b["poor_quality_repeats"] == 1
    assert cfg.loc["c", "n_repeats"] == 1  # no config_id: the cell is its own configuration
    assert list(cfg.index) == ["a", "b", "c"]
    # two sweeps measuring the same configuration (e.g. a variant sweep) are not pooled
    two = pd.concat([runs().assign(sweep="s1"), runs().assign(sweep="s2")], ignore_index=True)
    cfg2 = configs_table(two)
    assert len(cfg2) == 6 and (cfg2[cfg2["config_id"] == "a"]["n_repeats"] == 3).all()
