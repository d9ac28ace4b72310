"""Pure functions: reason decoding, counter wrap, trapezoid/counter energy, windowing."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from calorimeter.telemetry import (
    assign_windows,
    counter_deltas,
    counter_energy_j,
    cross_check_energy,
    cut_telemetry,
    decode_clock_event_reasons,
    infer_counter_width,
    phase_windows,
    reason_flags,
    reason_fractions,
    step_windows,
    time_weighted_mean,
    trapezoid_energy_j,
    unwrap_counter,
    window_summary,
)
from calorimeter.telemetry.convert import tidy_gpu_samples


# ---- clock-event reasons -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x24, ["sw_power_cap", "sw_thermal_slowdown"]),  # 0x20 + 0x04
        (0x48, ["hw_slowdown", "hw_thermal_slowdown"]),  # 0x40 + 0x08
        (0x80, ["hw_power_brake"]),
        (0x112, ["applications_clocks_setting", "sync_boost", "display_clock_setting"]),  # 0x100+0x10+0x2
        (0x1FF, list(decode_clock_event_reasons(0x1FF))),
    ],
)
def test_decode_reasons(mask: int, expected: list[str]) -> None:
    assert decode_clock_event_reasons(mask) == expected


def test_decode_reasons_unknown_and_missing() -> None:
    assert len(decode_clock_event_reasons(0x1FF)) == 9
    assert decode_clock_event_reasons(0x204) == ["sw_power_cap", "unknown_0x200"]
    assert decode_clock_event_reasons(None) == []
    assert reason_flags(0x4)["sw_power_cap"] is True and reason_flags(0x4)["gpu_idle"] is False
    assert reason_flags(None)["gpu_idle"] is None


def test_reason_fractions() -> None:
    # 4 valid samples: 0x4, 0x4, 0x24, 0x1 -> sw_power_cap 3/4, sw_thermal 1/4, idle 1/4; None skipped
    f = reason_fractions([0x4, 0x4, None, 0x24, 0x1])
    assert f["sw_power_cap"] == 0.75
    assert f["sw_thermal_slowdown"] == 0.25
    assert f["gpu_idle"] == 0.25
    assert f["hw_slowdown"] == 0.0
    assert math.isnan(reason_fractions([None])["gpu_idle"])


# ---- counter wrap --------------------------------------------------------------------------------
def test_counter_wrap_32bit() -> None:
    m = 2**32
    raw = [m - 100, m - 10, 5, 20]  # wraps between 2nd and 3rd sample: +10 then +5
    assert counter_deltas(raw, 32).tolist() == [90.0, 15.0, 15.0]
    assert unwrap_counter(raw, 32).tolist() == [m - 100, m - 10, m + 5, m + 20]


def test_counter_wrap_with_gap_and_modulus() -> None:
    raw = [10.0, np.nan, 2.0, 7.0]  # modulus 16: 10 -> 2 is +8, then +5
    out = unwrap_counter(raw, modulus=16)
    assert out[0] == 10.0 and math.isnan(out[1]) and out[2] == 18.0 and out[3] == 23.0
    assert infer_counter_width([1.0, 2.0**32 - 1]) == 32
    assert infer_counter_width([2.0**33]) == 64
    assert unwrap_counter([], 64).size == 0


# ---- energy --------------------------------------------------------------------------------------
def test_trapezoid_energy_by_hand() -> None:
    t = [0.0, 1.0, 2.0, 4.0]
    p = [100.0, 200.0, 200.0, 0.0]
    # full: (100+200)/2*1 + 200*1 + (200+0)/2*2 = 150 + 200 + 200 = 550 J
    assert trapezoid_energy_j(t, p) == pytest.approx(550.0)
    # window [0.5, 3]: p(0.5)=150, p(3)=100 -> (150+200)/2*0.5 + 200*1 + (200+100)/2*1 = 87.5+200+150
    assert trapezoid_energy_j(t, p, 0.5, 3.0) == pytest.approx(437.5)
    # window inside one interval [1.5, 1.75]: constant 200 W * 0.25 s
    assert trapezoid_energy_j(t, p, 1.5, 1.75) == pytest.approx(50.0)
    # not covered -> NaN, never extrapolated
    assert math.isnan(trapezoid_energy_j(t, p, -1.0, 1.0))
    # NaN samples are dropped: without the 200 W at t=1: (100+200)/2*2 + 200 = 500
    assert trapezoid_energy_j(t, [100.0, np.nan, 200.0, 0.0]) == pytest.approx(500.0)


def test_counter_energy_and_cross_check() -> None:
    t = [0.0, 1.0, 2.0]
    e_mj = [1_000_000.0, 1_150_000.0, 1_350_000.0]  # +150 J then +200 J
    assert counter_energy_j(t, e_mj) == pytest.approx(350.0)
    assert counter_energy_j(t, e_mj, 0.5, 1.5) == pytest.approx(75.0 + 100.0)
    cc = cross_check_energy(t, [150.0, 150.0, 200.0], e_mj)
    # integral: 150 + 175 = 325 J; rel diff (325-350)/350
    assert cc.integral_energy_j == pytest.approx(325.0)
    assert cc.rel_diff == pytest.approx(-25.0 / 350.0)
    assert time_weighted_mean([0.0, 1.0, 3.0], [10.0, 20.0, 20.0]) == pytest.approx((15.0 + 40.0) / 3.0)


# ---- windowing -----------------------------------------------------------------------------------
def _markers() -> pd.DataFrame:
    rows = []
    for rank, skew in ((0, 0.0), (1, 0.05)):
        for step, (b, e, ph) in enumerate([(10.0, 11.0, "warmup"), (11.0, 12.0, "measured"), (12.5, 13.5, "measured")]):
            rows.append({"rank": rank, "step": step, "phase": ph, "begin_s": b + skew, "end_s": e + skew})
    return pd.DataFrame(rows)


def test_step_and_phase_windows() -> None:
    w = step_windows(_markers())
    assert w["window"].tolist() == ["step0", "step1", "step2"]
    assert w["begin_s"].tolist() == [10.0, 11.0, 12.5]
    assert w["end_s"].tolist() == [11.05, 12.05, 13.55]
    wi = step_windows(_markers(), how="intersection")
    assert wi["begin_s"].tolist() == [10.05, 11.05, 12.55] and wi["end_s"].tolist() == [11.0, 12.0, 13.5]
    w0 = step_windows(_markers(), rank=0)
    assert w0["end_s"].tolist() == [11.0, 12.0, 13.5]
    pw = phase_windows(_markers(), rank=0)
    assert pw["window"].tolist() == ["warmup", "measured"]
    assert pw["begin_s"].tolist() == [10.0, 11.0] and pw["end_s"].tolist() == [11.0, 13.5]


def test_assign_and_cut() -> None:
    idx = assign_windows([9.0, 10.0, 10.99, 11.0, 12.2, 12.5], [10.0, 11.0, 12.5], [11.0, 12.0, 13.5])
    assert idx.tolist() == [-1, 0, 0, 1, -1, 2]  # [begin, end): 11.0 belongs to the second window
    with pytest.raises(ValueError):
        assign_windows([1.0], [0.0, 0.5], [1.0, 2.0])
    samples = pd.DataFrame({"time_s": [9.0, 10.5, 11.5, 12.7], "gpu_index": 0})
    cut = cut_telemetry(samples, step_windows(_markers(), rank=0))
    assert cut["step"].tolist() == [0, 1, 2] and cut["phase"].tolist() == ["warmup", "measured", "measured"]


def test_window_summary_energy_both_ways() -> None:
    # One GPU at 100 W for 0..2 s then 300 W, sampled every 0.5 s; counter exact.
    t = np.arange(0.0, 4.01, 0.5)
    p = np.where(t < 2.0, 100.0, 300.0)
    # exact energy of the step profile, in mJ
    e = np.where(t < 2.0, 100.0 * t, 200.0 + 300.0 * (t - 2.0)) * 1000.0 + 2.0**32
    raw = pd.DataFrame(
        {
            "time_s": t, "monotonic_s": t, "gpu_index": 0, "read_s": 0.0, "power_instant_w": p,
            "energy_mj": e.astype("uint64"), "clock_event_reasons": np.where(t < 2.0, 0x1, 0x4).astype("uint64"),
            "sm_clock_mhz": 1500.0, "gpu_temp_c": 50.0,
        }
    )  # fmt: skip
    tidy = tidy_gpu_samples(raw)
    windows = pd.DataFrame(
        {"window": ["a", "b"], "step": [0, 1], "phase": ["measured"] * 2, "begin_s": [0.0, 1.0], "end_s": [1.0, 3.0]}
    )
    s = window_summary(tidy, windows)
    a, b = s.iloc[0], s.iloc[1]
    assert a["counter_energy_j"] == pytest.approx(100.0) and a["integral_energy_j"] == pytest.approx(100.0)
    # window b [1,3]: counter 100*1 + 300*1 = 400 J; trapezoid over samples 1,1.5,2,2.5,3:
    # 50 + (100+300)/2*0.5 + 150 + 150 = 450 J (sampling smears the 2 s step)
    assert b["counter_energy_j"] == pytest.approx(400.0)
    assert b["integral_energy_j"] == pytest.approx(450.0)
    assert b["energy_rel_diff"] == pytest.approx(50.0 / 400.0)
    assert b["mean_power_w"] == pytest.approx(225.0)
    # reasons inside [1,3]: t=1,1.5 idle; t=2,2.5,3 power cap
    assert b["frac_sw_power_cap"] == pytest.approx(3 / 5) and b["frac_gpu_idle"] == pytest.approx(2 / 5)
    assert b["mean_sm_clock_mhz"] == pytest.approx(1500.0)
    assert math.isnan(b["nvlink_tx_bytes"])  # never invented
    # energy read only every other sample (slow group): same counter energy from its own samples
    sparse = raw.copy()
    sparse["energy_mj"] = sparse["energy_mj"].astype("UInt64").where(np.arange(len(t)) % 2 == 0)
    s2 = window_summary(tidy_gpu_samples(sparse), windows)
    assert s2["counter_energy_j"].tolist() == pytest.approx([100.0, 400.0])


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
