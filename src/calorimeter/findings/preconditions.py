"""Preconditions of the findings, checked on the data: which measured cells are in the regime a claim is about.

A finding compares only cells that meet its preconditions; when none (or no comparison) is left, the finding says
*cannot say* and which precondition the cells failed, with counts. The preconditions:

* :data:`STEADY`: the measured window is thermally steady, judged on the window itself from the telemetry (the
  runs table's ``thermally_steady``, :mod:`calorimeter.records.steadiness`): for every GPU, the temperature drift
  that its least-squares slope (fitted over the window extended back to 30 s) implies over the window, counted at
  least 30 s long, is below the sensor's resolution of 1 °C. A thermal claim read from a transient window measures
  how far the warm-up got, not the configuration. Tables written before the column (per-cell tables layout 6), and
  cells without GPU temperature telemetry, have only the warm-up's runtime flag (``warmup_reason == "steady"``); the
  precondition's name says so.
* :data:`POWER_CAPPED`: the GPUs sit at the power cap (NVML's software power-cap reason set for at least
  :data:`POWER_CAP_MIN_FRAC` of the window) and their mean SM clock is below the ceiling by more than
  :data:`CEILING_MARGIN_MHZ`: only there can a configuration move the clock (a cell at the ceiling has nothing to
  throttle, a cell below the cap is limited by its load).
* :data:`BELOW_POWER_CAP`: the GPUs are below the power cap (its reason set for less than
  :data:`POWER_CAP_MIN_FRAC` of the window): at the cap the limiter sets the average power, and with it the
  temperature, whatever the load asks for, so a claim that a configuration *lowers* power or temperature cannot show
  there (a comparison of two capped cells would always read "no change").
* :data:`GPU_BOUND`: the GPUs, not the host, set the pace (the traced rank's kernels busy for at least
  :data:`GPU_BOUND_BUSY_FRAC` of the iteration; an untraced cell counts when it sits at the power cap): a host-bound
  cell idles part of each step, which lowers its power and temperature and raises its clock at the cap, so a
  comparison with a GPU-bound cell measures utilisation, not the knob.
* :data:`GPU`: measured on GPUs (CPU ranks have no GPU telemetry), and :data:`REAL_MODEL`: not a toy model of the
  test suite.

Which finding needs which, by physics and the same everywhere (docs/findings.md): every claim that a configuration
moves power or temperature needs :data:`STEADY` and :data:`BELOW_POWER_CAP` on both sides; every clock comparison
between configurations :data:`STEADY` and :data:`POWER_CAPPED`; every comparison between configurations (clock,
power, temperature, throughput, efficiency) :data:`GPU_BOUND` on both sides.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calorimeter.findings.select import column
from calorimeter.records.steadiness import FIT_MIN_S, SENSOR_RESOLUTION_C

#: time share with NVML's software power cap reason set (new and old column names)
POWER_CAP = ("throttle_sw_power_cap_frac", "throttle_sw_power_cap")
#: a cell "sits at the power cap" when the power-cap reason is set at least this share of its measured window
POWER_CAP_MIN_FRAC = 0.5
#: one SM clock step of Hopper (MHz): the smallest clock effect that means anything
CLOCK_STEP_MHZ = 15.0
#: a cell is "below the clock ceiling" when its mean SM clock is at least this far below the maximum SM clock
CEILING_MARGIN_MHZ = 2 * CLOCK_STEP_MHZ
#: maximum SM clock (MHz) of the GPUs (NVML's max SM clock of H100 SXM and H200 SXM); others: the sweep's highest
#: per-cell peak SM clock
SM_CLOCK_CEILING_MHZ = {"h100": 1980.0, "h200": 1980.0}


@dataclass(frozen=True)
class Precondition:
    """A condition on measured cells (rows of ``runs``).

    Attributes:
        name: what it requires, for the reader (``"a steady measured window"``).
        keep: the rows that meet it (a boolean Series over the rows of ``runs``).
    """

    name: str
    keep: Callable[[pd.DataFrame], pd.Series]


def _runtime_flag(d: pd.DataFrame) -> pd.Series:
    if "warmup_reason" not in d.columns:
        return pd.Series(False, index=d.index)
    return d["warmup_reason"].astype(str).eq("steady")


def _steady(d: pd.DataFrame) -> pd.Series:
    if "thermally_steady" not in d.columns:
        return _runtime_flag(d)
    judged = d["thermally_steady"]
    return judged.where(judged.notna(), _runtime_flag(d)).astype(bool)


def clock_ceiling_mhz(d: pd.DataFrame) -> pd.Series:
    """The maximum SM clock of each row's GPU kind (NaN where unknown and no peak clock was recorded)."""
    peak = column(d, "sm_clock_peak_mhz")
    fallback = float(peak.max()) if peak.notna().any() else np.nan
    hw = d["hardware"] if "hardware" in d.columns else pd.Series("", index=d.index)
    return hw.map(lambda h: SM_CLOCK_CEILING_MHZ.get(str(h), fallback)).astype(float)


def _power_capped(d: pd.DataFrame) -> pd.Series:
    cap = column(d, *POWER_CAP)
    clock = column(d, "sm_clock_avg_mhz")
    return (cap >= POWER_CAP_MIN_FRAC) & (clock <= clock_ceiling_mhz(d) - CEILING_MARGIN_MHZ)


def _gpu(d: pd.DataFrame) -> pd.Series:
    return d["hardware"].astype(str).ne("cpu") if "hardware" in d.columns else pd.Series(True, index=d.index)


def _real_model(d: pd.DataFrame) -> pd.Series:
    return ~d["model"].astype(str).str.startswith("tiny") if "model" in d.columns else pd.Series(True, index=d.index)


STEADY = Precondition(f"a thermally steady measured window (every GPU's temperature drift over it, counted at least "
                      f"{FIT_MIN_S:g} s long, from its least-squares slope over >= {FIT_MIN_S:g} s, below the sensor's "
                      f"{SENSOR_RESOLUTION_C:g} °C; tables without it: the warm-up's steady flag)", _steady)
POWER_CAPPED = Precondition(f"GPUs at the power cap (>= {POWER_CAP_MIN_FRAC:.0%} of the window) and their mean SM "
                            f"clock >= {CEILING_MARGIN_MHZ:g} MHz below the ceiling", _power_capped)
BELOW_POWER_CAP = Precondition(f"GPUs below the power cap (its reason set < {POWER_CAP_MIN_FRAC:.0%} of the window: at "
                               "the cap the limit, not the load, sets power and temperature)",
                               lambda d: column(d, *POWER_CAP) < POWER_CAP_MIN_FRAC)
#: a cell is GPU-bound when its traced rank's kernels are busy for at least this share of the iteration (the
#: projection's host-bound threshold, calorimeter.projection.schedule.HOST_BOUND_BUSY_FRAC, is the same number)
GPU_BOUND_BUSY_FRAC = 0.80


def _gpu_bound(d: pd.DataFrame) -> pd.Series:
    busy = column(d, "kernel_busy_s") / column(d, "iteration_time_s")
    capped = column(d, *POWER_CAP) >= POWER_CAP_MIN_FRAC
    return (busy >= GPU_BOUND_BUSY_FRAC).where(busy.notna(), capped)


GPU = Precondition("measured on GPUs", _gpu)
GPU_BOUND = Precondition(f"GPU-bound: kernels busy >= {GPU_BOUND_BUSY_FRAC:.0%} of the iteration (traced rank; "
                         "untraced: at the power cap), not waiting on the host", _gpu_bound)
REAL_MODEL = Precondition("a real model (not a test-suite toy)", _real_model)
MULTI_NODE = Precondition("two or more nodes (inter-node communication)", lambda d: column(d, "nodes") > 1)
#: a job is communication-bound when at least this share of its step is communication not hidden behind compute
COMM_BOUND_MIN_FRAC = 0.2
COMM_BOUND = Precondition(f"communication-bound: >= {COMM_BOUND_MIN_FRAC:.0%} of the step exposed communication "
                          "(kernel trace)", lambda d: column(d, "exposed_comm_frac") >= COMM_BOUND_MIN_FRAC)


#: each table's precondition masks, computed once per table (every finding screens the same runs table)
_MASKS: dict[int, tuple[weakref.ref, dict[str, pd.Series]]] = {}


def _mask(runs: pd.DataFrame, c: Precondition) -> pd.Series:
    key = id(runs)
    held = _MASKS.get(key)
    if held is None or held[0]() is not runs:
        for k in [k for k, (ref, _) in _MASKS.items() if ref() is None]:
            del _MASKS[k]
        held = _MASKS[key] = (weakref.ref(runs), {})
    masks = held[1]
    if c.name not in masks:
        masks[c.name] = c.keep(runs).fillna(False).astype(bool)
    return masks[c.name]


def meets(runs: pd.DataFrame, *conds: Precondition) -> pd.Series:
    """The ok rows of ``runs`` that meet every precondition (a boolean Series)."""
    keep = runs["status"].eq("ok") if "status" in runs.columns else pd.Series(False, index=runs.index)
    for c in conds:
        keep &= _mask(runs, c)
    return keep


def screen(runs: pd.DataFrame | None, *conds: Precondition) -> tuple[pd.DataFrame, str]:
    """The ok rows of ``runs`` that meet every precondition, and a note of what was left out and why (empty when
    nothing was). Rows not ``ok`` pass through untouched (the comparisons never use them)."""
    if runs is None or runs.empty or "status" not in runs.columns:
        return pd.DataFrame() if runs is None else runs, ""
    ok = runs["status"] == "ok"
    keep = pd.Series(True, index=runs.index)
    notes = []
    for c in conds:
        k = _mask(runs, c)
        failed = int((ok & keep & ~k).sum())
        if failed:
            notes.append(f"{failed} of {int(ok.sum())} measured cell(s) fail: {c.name}")
        keep &= k
    return runs[~ok | keep], "; ".join(notes)


def with_note(missing: str, note: str) -> str:
    """``missing`` followed by the screen's note (what preconditions left out)."""
    return f"{missing} ({note})" if note else missing
