"""Steady-state warm-up and measured length: the decisions of calorimeter.train.steady with fake temperatures, fake
ranks and a fake clock (no GPU needed); the real loop is run on CPU ranks by tests/test_train_dist.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calorimeter.plan.cell import Cell
from calorimeter.records.steadiness import slope_c_per_min
from calorimeter.train import steady
from calorimeter.train.steady import SteadyState


class Clock:
    """A fake wall clock that every step advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(steady.time, "time", c)
    return c


def heating(tau_s: float, rise_c: float, t0: float, drift_c_per_min: float = 0.0):
    """A GPU heating like the H200s: first-order rise, then an optional slow drift; read every 50 ms up to now."""

    def temps(now: float) -> list[tuple[float, float]]:
        t = np.arange(t0, now, 0.05)
        v = 40 + rise_c * (1 - np.exp(-(t - t0) / tau_s)) + drift_c_per_min * (t - t0) / 60
        return list(zip(t, np.round(v), strict=True))  # NVML reads whole degrees

    return temps


def plateau(t0: float, amplitude_c: float = 1.0, period_s: float = 8.0, drift_c_per_min: float = 0.0):
    """A GPU already on its plateau: +-``amplitude_c`` swings with a period of a few steps (pipeline stages
    alternating load) and an optional steady drift, read every 50 ms in whole degrees."""

    def temps(now: float) -> list[tuple[float, float]]:
        t = np.arange(t0 - 60.0, now, 0.05)
        v = 60 + amplitude_c * np.sin(2 * np.pi * (t - t0) / period_s) + drift_c_per_min * (t - t0) / 60
        return list(zip(t, np.round(v), strict=True))

    return temps


def cell(**kw) -> Cell:
    base = dict(sweep="s", model="tiny-gpt", hardware="h200", nodes=1, gpus_per_node=2, warmup="steady",
                warmup_steps=2, warmup_max_steps=100, warmup_max_s=180.0, measured_steps=5, measured_min_s=20.0)
    return Cell(**{**base, **kw})


def run(schedule: SteadyState, clock: Clock, step_s: float) -> list[str]:
    phases = []
    for phase in schedule:
        phases.append(phase)
        clock.now += step_s
        schedule.done(step_s)
    return phases


def test_slope_by_hand() -> None:
    r = [(float(t), 50.0 + 0.5 * t) for t in range(0, 21)]  # +0.5 C/s = 30 C/min
    assert slope_c_per_min(r, 20.0, 20.0) == pytest.approx(30.0)
    assert math.isnan(slope_c_per_min(r, 20.0, 40.0))  # the readings span only half the window: too early
    assert math.isnan(slope_c_per_min(r[:2], 20.0, 1.0))


def test_warms_up_until_the_temperature_is_steady(clock: Clock) -> None:
    temps = heating(tau_s=8.0, rise_c=30.0, t0=clock.now)
    s = SteadyState(cell(), lambda: temps(clock.now), "fake")
    phases = run(s, clock, step_s=1.0)
    # first-order rise with tau 8 s: the 30 s slope falls under 3 C/min (under 1 °C over the 20 s measured) some
    # 30-60 s in (whole degrees, so noisy)
    assert 30 <= s.steps <= 60 and s.reason == "steady" and abs(s.slope) * 20 / 60 < 1.0
    assert phases[: s.steps] == ["warmup"] * s.steps
    # measured: at least 20 s at 1 s per step, and at least measured_steps
    assert phases[s.steps:] == ["measured"] * 20 and s.measured == 20
    r = s.record()
    assert r["mode_used"] == "steady" and r["steps"] == s.steps and r["seconds"] == pytest.approx(s.steps)


def test_cap_on_steps_and_seconds(clock: Clock) -> None:
    temps = heating(tau_s=8.0, rise_c=30.0, t0=clock.now, drift_c_per_min=6.0)  # never steady
    s = SteadyState(cell(warmup_max_steps=15), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.0)
    assert s.steps == 15 and s.reason.startswith("cap")
    s = SteadyState(cell(warmup_max_s=30.0), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=4.0)
    assert s.steps == 8 and s.reason.startswith("cap")  # 8 steps x 4 s reach 30 s


def test_every_rank_agrees(clock: Clock) -> None:
    """Rank 0's GPU settles fast, rank 1's slowly: rank 0 warms up until rank 1 is steady too (the collective vote is
    the minimum over ranks: rank 1's vote is what it would say at the same moment)."""
    cool, hot = heating(2.0, 10.0, clock.now), heating(12.0, 35.0, clock.now)

    def with_rank1(values: np.ndarray) -> np.ndarray:
        if len(values) != 4:  # "has a temperature" and the slowest step time: the same on both ranks here
            return values
        slope1 = slope_c_per_min(hot(clock.now), clock.now, 30.0)
        return np.minimum(values, [-abs(slope1) if slope1 == slope1 else -1e9, *values[1:]])

    rank0 = SteadyState(cell(), lambda: cool(clock.now), "fake", agree_min=with_rank1)
    run(rank0, clock, 1.0)
    clock.now = 1000.0
    alone0 = SteadyState(cell(), lambda: cool(clock.now), "fake")
    run(alone0, clock, 1.0)
    clock.now = 1000.0
    alone1 = SteadyState(cell(), lambda: hot(clock.now), "fake")
    run(alone1, clock, 1.0)
    assert alone0.steps < alone1.steps  # the hot GPU needs longer on its own
    assert rank0.steps >= alone1.steps  # and holds rank 0 back: nobody measures before every GPU is steady


def test_the_shortest_warm_up_holds_however_steady_the_temperature_reads(clock: Clock) -> None:
    """On a plateau the drift rule holds once 30 s are fitted; ``warmup_min_s`` keeps warming up until it has passed,
    on every rank alike (a rank that started later votes to go on), and never beyond the cap."""
    temps = plateau(clock.now)
    s = SteadyState(cell(), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.0)
    early = s.steps
    assert s.reason == "steady" and early < 60
    clock.now = 1000.0
    s = SteadyState(cell(warmup_min_s=90.0), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.0)
    assert s.reason == "steady" and s.steps == 90 and s.record()["min_s"] == 90.0

    def younger_rank1(values: np.ndarray) -> np.ndarray:  # rank 1 started 20 s later: still young for 20 s more
        if len(values) != 4:
            return values
        return np.minimum(values, [*values[:3], -1.0 if clock.now - 1000.0 < 110.0 else 0.0])

    clock.now = 1000.0
    s = SteadyState(cell(warmup_min_s=90.0, warmup_max_steps=200), lambda: temps(clock.now), "fake",
                    agree_min=younger_rank1)
    run(s, clock, step_s=1.0)
    assert s.reason == "steady" and s.steps == 110
    clock.now = 1000.0
    s = SteadyState(cell(warmup_min_s=90.0, warmup_max_s=60.0), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.0)
    assert s.steps == 60  # the cap wins (the plan prunes such a cell: tests/test_plan_config.py)


@pytest.mark.parametrize(("trace", "steady_at"), [
    ("plateau", True),  # +-1 °C swings, no drift: steady as soon as 30 s of readings are fitted
    ("ramp", False),  # 4 °C/min: 1.33 °C over the 20 s measured, never steady (the cap ends the warm-up)
    ("slow drift", True),  # 0.5 °C/min: 0.17 °C over 20 s, steady
])
def test_the_drift_rule_on_a_plateau_a_ramp_and_a_slow_drift(clock: Clock, trace: str, steady_at: bool) -> None:
    temps = {"plateau": plateau(clock.now), "ramp": plateau(clock.now, 0.0, drift_c_per_min=4.0),
             "slow drift": plateau(clock.now, drift_c_per_min=0.5)}[trace]
    s = SteadyState(cell(warmup_max_s=90.0), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.5)
    assert (s.reason == "steady") is steady_at, (s.reason, s.drift)
    if steady_at:  # the first step after which the fit saw a full window
        assert s.steps == 2 and s.drift < 1.0
    else:
        assert s.reason.startswith("cap") and s.drift > 1.0  # 4 °C/min over 14 steps of 1.5 s: 1.4 °C
    r = s.record()
    assert r["drift_threshold_c"] == 1.0 and r["final_drift_c"] == pytest.approx(s.drift)
    assert r["slope_threshold_c_per_min"] is None and r["window_s"] == 30.0


def test_the_plateau_defeats_a_15_s_slope_threshold_but_not_the_drift_rule(clock: Clock) -> None:
    """Why the rule changed: on the +-1 °C plateau the slope fitted over 15 s swings by several °C/min, so the older
    rule (at most 1 °C/min over 15 s, kept as the optional cap) waits for chance alignments; the drift rule does
    not."""
    temps = plateau(clock.now)
    slopes = np.array([slope_c_per_min(temps(clock.now + dt), clock.now + dt, 15.0) for dt in np.arange(0, 60, 0.5)])
    assert np.mean(np.abs(slopes) <= 1.0) < 0.25 and np.median(np.abs(slopes)) > 2.0
    old = SteadyState(cell(steady_window_s=15.0, steady_slope_c_per_min=1.0), lambda: temps(clock.now), "fake")
    run(old, clock, step_s=1.5)
    clock.now = 1000.0
    new = SteadyState(cell(), lambda: temps(clock.now), "fake")
    run(new, clock, step_s=1.5)
    assert new.steps < old.steps


def test_a_slope_cap_kept_from_older_configs_still_applies(clock: Clock) -> None:
    """1.8 °C/min is 0.9 °C over the 30 s a window is judged on at least (steady by the drift rule) but above a
    1 °C/min cap."""
    t0 = clock.now

    def temps(now: float) -> list[tuple[float, float]]:  # a sensor finer than whole degrees: no rounding steps
        t = np.arange(t0 - 60.0, now, 0.05)
        return list(zip(t, 60 + 1.8 * (t - t0) / 60, strict=True))

    s = SteadyState(cell(warmup_max_s=60.0, measured_min_s=10.0), lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.5)
    assert s.reason == "steady"
    clock.now = 1000.0
    s = SteadyState(cell(warmup_max_s=60.0, measured_min_s=10.0, steady_slope_c_per_min=1.0),
                    lambda: temps(clock.now), "fake")
    run(s, clock, step_s=1.5)
    assert s.reason.startswith("cap")


def test_fixed_warmup_and_cpu_fallback_are_recorded(clock: Clock) -> None:
    s = SteadyState(cell(warmup="fixed", warmup_steps=3, measured_min_s=0.0), lambda: [], "fake")
    assert run(s, clock, 1.0) == ["warmup"] * 3 + ["measured"] * 5
    assert s.record()["mode_used"] == "fixed" and s.reason == "fixed"
    # no temperature (a CPU rank): the fixed warm-up and measured_steps, whatever measured_min_s says
    s = SteadyState(cell(), None, "no GPU temperature on a CPU rank", profile_steps=1)
    assert run(s, clock, 0.01) == ["warmup"] * 2 + ["measured"] * 5 + ["profiled"]
    r = s.record()
    assert r["mode"] == "steady" and r["mode_used"] == "fixed" and "CPU rank" in r["reason"]


def test_fixed_warmup_on_a_gpu_still_measures_long_enough(clock: Clock) -> None:
    s = SteadyState(cell(warmup="fixed", warmup_steps=2, measured_min_s=3.0), lambda: [(0.0, 50.0)], "fake")
    assert run(s, clock, 0.5) == ["warmup"] * 2 + ["measured"] * 6  # ceil(3 s / 0.5 s) = 6 > 5


def test_temperature_from_this_hosts_sampler_stream(tmp_path) -> None:
    """The readings come from the node sampler's stream of this host (found through its metadata), for this GPU,
    while the sampler is still writing it (no end-of-stream marker yet); another host's stream is ignored."""
    import json
    import socket

    from calorimeter.records.paths import RunPaths
    from calorimeter.telemetry.schema import GPU_SCHEMA
    from calorimeter.telemetry.streamio import ChunkedStreamWriter

    run = RunPaths(tmp_path)
    source = steady.sampler_stream_source(tmp_path, nvml_index=1)
    assert source() == []  # no sampler yet
    for node, host, temp in ((0, "elsewhere", 90.0), (1, socket.gethostname(), 50.0)):
        run.node(node).mkdir(parents=True)
        (run.node(node) / f"sampler-node{node}.json").write_text(
            json.dumps({"hostname": host, "files": {"gpu_stream": f"gpu-node{node}.arrows"}}))
        w = ChunkedStreamWriter(run.node(node) / f"gpu-node{node}.arrows", GPU_SCHEMA, flush_interval_s=0.5)
        for i in range(4):
            for gpu in (0, 1):
                w.append({"time_s": 100.0 + i, "monotonic_s": float(i), "gpu_index": gpu, "read_s": 0.0,
                          "gpu_temp_c": temp + gpu + i if i != 2 else None})
        w.flush()  # still open, as while the cell trains
    assert source() == [(100.0, 51.0), (101.0, 52.0), (103.0, 54.0)]  # GPU 1 of this host; the failed read dropped
    cpu = steady.temperature_source(tmp_path, type("D", (), {"type": "cpu"})())
    assert cpu == (None, "no GPU temperature on a CPU rank")
