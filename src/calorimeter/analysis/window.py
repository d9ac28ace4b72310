"""The one analysis path of GPU telemetry: windows, averages, peaks, energies, throttle shares and data quality.

Everything that turns samples into a number lives here; the pipeline's tables (:mod:`calorimeter.analysis.cell`),
the benchmarks and the tests use these definitions and no others.

* **Samples of one GPU.** Rows are put in time order; a row whose timestamp repeats an earlier one is a duplicate
  (the first in recorded order is kept); a row recorded after a later-stamped one is out of order (wall clock
  stepped back, or a re-sent batch). Both are counted.
* **NVML errors.** A null, non-finite or negative reading (older samplers stored NVML's ``-1``) is dropped, never
  averaged in; in the columns read every sample it is counted as an NVML error. A counter reading that is negative
  or all-ones (NVML's "not available", :func:`calorimeter.telemetry.counters.invalid_reading`) is dropped and
  counted as an NVML error too, and noted by counter: never a glitch, a reset, a wrap or energy.
* **Coverage rule.** Every aggregate - average, peak, energy, link bytes, throttle share - is NaN when its column's
  valid samples span less than ``MIN_COVERAGE`` of the window (nothing is extrapolated).
* **Gaps.** Two consecutive samples more than ``MAX_GAP_PERIODS`` sampling periods apart (plus half a period of
  timing jitter) leave a gap: the time
  between them is interpolated (or held), not observed. Gaps are counted and their length reported; the share of the
  window observed without gaps is the data-quality coverage (``power_coverage_frac``), and a cell whose coverage is
  under MIN_COVERAGE is marked poor - its numbers stay, flagged, rather than being thrown away.
* **Time-weighted average**: trapezoid of the samples over the window clipped to the sampled range, with linear
  interpolation at its edges, divided by its length. **Peak**: maximum (or minimum) of the samples inside.
* **Average power where the samples do not observe it**: where sampled power is observed (without gaps) over less
  than ``MIN_COVERAGE`` of the window and the energy counter covers at least that, ``power_avg_w`` is the counter's
  mean power (``power_source`` ``energy_counter``, said in the notes): a trapezoid through the gaps of a load that
  alternates faster than they last (a pipeline stage's bursts) is off by tens of percent (4x H200, 2026-11-28: a PP4
  stage sampled at 362 W that its counter put at 436 W, another at 634 W against 446 W), and the driver's counter
  integrates every burst. The peak stays the samples' (a lower bound there).
* **Energy**: from the GPU's energy counter (the increase over the window, interpolated at the edges, summed over the
  counter's segments: see :mod:`calorimeter.telemetry.counters` for glitches and resets) and from the trapezoid of
  power; each with the seconds it covers.
* **Thermal steadiness**: the die temperature's least-squares slope over the window extended back to 30 s where
  shorter, and the drift it implies over the window (:mod:`calorimeter.records.steadiness`).
* **Throttle share**: from the sampled clock-event bitmask (each sample holds until the next one, over covered
  intervals only) and, where the driver keeps it, from its accumulated time per reason (the counter's increase over
  the window / the seconds covered), which does not depend on the sampling period.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calorimeter.records.legacy import upgrade_samples
from calorimeter.records.steadiness import drift_c, fit_begin, lsq_slope_c_per_min
from calorimeter.telemetry.counters import CounterTrace, counter_trace, infer_counter_width
from calorimeter.telemetry.reasons import ACCUMULATED_REASON_FIELDS, CLOCK_EVENT_REASON_BITS, REASON_NAMES
from calorimeter.telemetry.reasons import accumulated_column as _acc_col
from calorimeter.telemetry.schema import GPU_COUNTERS

#: a column must cover at least this share of a window to be summarised
MIN_COVERAGE = 0.9
#: samples further apart than this many sampling periods leave a gap (the time between them is not observed)
MAX_GAP_PERIODS = 2.0
#: timing jitter allowed on top of it, in periods (one lost sample leaves 2 periods +- jitter: not a gap)
GAP_JITTER_PERIODS = 0.5

#: power sources, in order of preference: the instantaneous reading, else the driver's ~1 s average
POWER_COLUMNS: tuple[str, ...] = ("power_instant_w", "power_driver_avg_w")
#: gauge columns: (sample column, output prefix)
GAUGES: tuple[tuple[str, str], ...] = (
    ("gpu_temp_c", "temp"),
    ("hbm_temp_c", "hbm_temp"),
    ("sm_clock_mhz", "sm_clock"),
    ("mem_clock_mhz", "mem_clock"),
    ("gpu_util_pct", "gpu_util"),
    ("memory_power_driver_avg_w", "memory_power"),
)
#: unit suffix of each gauge prefix in output column names
GAUGE_UNITS = {"temp": "c", "hbm_temp": "c", "sm_clock": "mhz", "mem_clock": "mhz", "gpu_util": "pct",
               "memory_power": "w", "power": "w"}
#: a sample is "under load" when the GPU draws at least this share of its power limit (``power_limit_w`` of the
#: same sample): the SM clock over those samples reads throttling under load apart from the idle and bubble time a
#: pipeline's stages spend waiting, which the time average mixes in (on the 4x H200 depth cells the reading moved
#: by less than 10 MHz between 50% and 80%)
LOADED_POWER_FRAC = 0.6
#: columns the sampler reads in every sample: a null there is a failed read (an NVML error)
EVERY_SAMPLE: tuple[str, ...] = (*POWER_COLUMNS, *(c for c, _ in GAUGES), "clock_event_reasons")
#: cumulative byte counters, by their tidy names
LINK_COUNTERS: tuple[str, ...] = ("nvlink_rx_bytes", "nvlink_tx_bytes", "pcie_rx_bytes", "pcie_tx_bytes")
#: sampled share of the window each clock-event reason was set
THROTTLE_COLUMNS: tuple[str, ...] = tuple(f"throttle_{n}_frac" for n in REASON_NAMES)
#: the same from the driver's accumulated time (only the reasons NVML accumulates)
THROTTLE_COUNTER_COLUMNS: tuple[str, ...] = tuple(f"throttle_{n}_counter_frac" for n in ACCUMULATED_REASON_FIELDS)
#: data-quality columns of a GPU over a window (counts, except the fractions and seconds)
QUALITY_COLUMNS: tuple[str, ...] = (
    "samples_expected", "samples_received", "gaps", "gap_s", "nvml_errors", "duplicate_timestamps",
    "out_of_order_timestamps", "counter_glitches", "counter_resets", "power_coverage_frac",
    "energy_counter_coverage_frac",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# pure functions on sorted arrays


def coverage_s(t: np.ndarray, begin: float, end: float, max_gap_s: float = np.inf) -> float:
    """Seconds of ``[begin, end]`` between consecutive samples at most ``max_gap_s`` apart."""
    if t.size < 2 or not end > begin:
        return 0.0
    lo, hi = t[:-1], t[1:]
    ok = (hi - lo) <= max_gap_s
    return float(np.clip(np.minimum(hi[ok], end) - np.maximum(lo[ok], begin), 0.0, None).sum())


def clip_window(t: np.ndarray, begin: float, end: float) -> tuple[float, float] | None:
    """``[begin, end]`` clipped to the sampled range, or None when the samples span less than MIN_COVERAGE of it."""
    if t.size < 2 or not end > begin:
        return None
    b, e = max(begin, float(t[0])), min(end, float(t[-1]))
    if e <= b or (e - b) < MIN_COVERAGE * (end - begin):
        return None
    return b, e


def integral(t: np.ndarray, v: np.ndarray, begin: float, end: float) -> float:
    """Trapezoid integral of ``v(t)`` over ``[begin, end]`` (inside the sampled range), interpolated at the edges."""
    inside = (t > begin) & (t < end)
    ts = np.concatenate(([begin], t[inside], [end]))
    vs = np.concatenate(([np.interp(begin, t, v)], v[inside], [np.interp(end, t, v)]))
    return float(np.sum((vs[1:] + vs[:-1]) * np.diff(ts)) / 2.0)


def time_average(t: np.ndarray, v: np.ndarray, begin: float, end: float) -> float:
    """Time-weighted mean over the clipped window; NaN if not covered."""
    w = clip_window(t, begin, end)
    return integral(t, v, *w) / (w[1] - w[0]) if w is not None else float("nan")


def peak(t: np.ndarray, v: np.ndarray, begin: float, end: float, how: str = "max") -> float:
    """Maximum (or minimum) of the samples inside ``[begin, end]``; NaN if the window is not covered."""
    if clip_window(t, begin, end) is None:
        return float("nan")
    x = v[(t >= begin) & (t <= end)]
    if not x.size:
        return float("nan")
    return float(x.max() if how == "max" else x.min())


def counter_delta(t: np.ndarray, trace: CounterTrace, begin: float, end: float) -> tuple[float, float]:
    """(increase of a counter over ``[begin, end]``, seconds covered), summed over its segments; NaN for both when
    the segments cover less than MIN_COVERAGE of the window (a reset's cut is not covered).

    Args:
        t: Times of the readings ``trace`` was made from (sorted).
        trace: The counter's trace.
        begin: Window start.
        end: Window end.
    """
    nan = (float("nan"), float("nan"))
    if not end > begin:
        return nan
    delta = covered = 0.0
    for s in np.unique(trace.segment[trace.segment >= 0]):
        m = trace.segment == s
        ts, cs = t[m], trace.cumulative[m]
        b, e = max(begin, float(ts[0])), min(end, float(ts[-1]))
        if e > b:
            delta += float(np.interp(e, ts, cs) - np.interp(b, ts, cs))
            covered += e - b
    if covered < MIN_COVERAGE * (end - begin):
        return nan
    return delta, covered


def hold_shares(t: np.ndarray, masks: np.ndarray, begin: float, end: float) -> dict[int, float]:
    """Share of the sampled part of ``[begin, end]`` during which each reason bit was set.

    Each sample's mask holds until the next sample; NaN for every bit when the samples span less than MIN_COVERAGE
    of the window.
    """
    out = dict.fromkeys(CLOCK_EVENT_REASON_BITS, float("nan"))
    if clip_window(t, begin, end) is None:
        return out
    length = np.clip(np.minimum(t[1:], end) - np.maximum(t[:-1], begin), 0.0, None)
    total = float(length.sum())
    m = masks[:-1].astype(np.uint64)
    return {bit: float(length[(m & np.uint64(bit)) != 0].sum() / total) for bit in CLOCK_EVENT_REASON_BITS}


# ---------------------------------------------------------------------------------------------------------------
# one GPU's samples


def _numeric(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def valid_readings(s: pd.Series) -> np.ndarray:
    """A column's readings as float64 with NVML errors (null, non-finite, negative) as NaN."""
    v = _numeric(s)
    return np.where(np.isfinite(v) & (v >= 0), v, np.nan)


@dataclass(frozen=True)
class WindowQuality:
    """What the samples of one GPU say about their own quality over a window (see QUALITY_COLUMNS)."""

    window_s: float
    samples_expected: float
    samples_received: int
    gaps: int
    gap_s: float
    nvml_errors: int
    duplicate_timestamps: int
    out_of_order_timestamps: int
    counter_glitches: int
    counter_resets: int
    power_coverage_frac: float
    energy_counter_coverage_frac: float
    notes: tuple[str, ...] = ()

    @property
    def poor(self) -> bool:
        """A number of the window was lost or may be off: power observed (without gaps) over less than MIN_COVERAGE of
        the window, the energy counter covering less than that, a counter reset, or fewer than MIN_COVERAGE of the
        expected samples."""
        return bool(
            not self.power_coverage_frac >= MIN_COVERAGE
            or (self.energy_counter_coverage_frac == self.energy_counter_coverage_frac
                and self.energy_counter_coverage_frac < MIN_COVERAGE)
            or self.counter_resets > 0
            or self.samples_received < MIN_COVERAGE * self.samples_expected
        )

    def to_dict(self) -> dict[str, float | int | str]:
        """The quality columns plus ``data_quality`` (good or poor) and ``quality_notes``."""
        d: dict[str, float | int | str] = {c: getattr(self, c) for c in QUALITY_COLUMNS}
        d["data_quality"] = "poor" if self.poor else "good"
        d["quality_notes"] = "; ".join(self.notes)
        return d


class GpuSamples:
    """The samples of one GPU (one node's ``gpu_index``), prepared once and summarised over any window.

    Args:
        rows: The GPU's rows of a tidy telemetry table (or of a sampler stream) in recorded order.
        period_s: The sampler's period (default: the median interval between rows).
    """

    def __init__(self, rows: pd.DataFrame, period_s: float | None = None):
        rows = upgrade_samples(rows)
        t_rec = _numeric(rows["time_s"]) if "time_s" in rows.columns else np.empty(0)
        seen = np.fmax.accumulate(np.where(np.isnan(t_rec), -np.inf, t_rec)) if t_rec.size else t_rec
        late = np.zeros(t_rec.size, dtype=bool)
        late[1:] = t_rec[1:] < seen[:-1]
        order = np.argsort(t_rec, kind="stable")  # stable: among equal times the first recorded comes first
        ts = t_rec[order]
        dup = np.zeros(ts.size, dtype=bool)
        dup[1:] = ts[1:] == ts[:-1]
        keep = order[~dup & ~np.isnan(ts)]
        self.frame = rows.iloc[keep].reset_index(drop=True)
        self.t = t_rec[keep]
        self._duplicate_t = ts[dup]
        self._late_t = t_rec[late]
        gaps = np.diff(self.t)
        self.period_s = float(period_s) if period_s else (float(np.median(gaps)) if gaps.size else float("nan"))
        self.max_gap_s = ((MAX_GAP_PERIODS + GAP_JITTER_PERIODS) * self.period_s if self.period_s == self.period_s
                          else np.inf)
        self._memo: dict[tuple[str, str], object] = {}

    def _cached(self, kind: str, key: str, make: Callable[[], object]) -> object:
        if (kind, key) not in self._memo:
            self._memo[kind, key] = make()
        return self._memo[kind, key]

    # -- columns ---------------------------------------------------------------------------------------------

    def series(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        """Sorted (time, value) of the valid readings of a column (null, non-finite and negative dropped)."""

        def make() -> tuple[np.ndarray, np.ndarray]:
            if col not in self.frame.columns:
                return np.empty(0), np.empty(0)
            v = valid_readings(self.frame[col])
            ok = ~np.isnan(v)
            return self.t[ok], v[ok]

        return self._cached("series", col, make)  # type: ignore[return-value]

    def errors_t(self, col: str) -> np.ndarray:
        """Times of failed reads of a column read every sample (null or negative), if it was ever read at all."""
        if col not in self.frame.columns or col not in EVERY_SAMPLE:
            return np.empty(0)
        bad = np.isnan(valid_readings(self.frame[col]))
        return self.t[bad] if (~bad).any() else np.empty(0)

    def power_column(self) -> str | None:
        """``power_instant_w`` where present, else the driver's average, else None."""
        for col in POWER_COLUMNS:
            if self.series(col)[0].size >= 2:
                return col
        return None

    def counter(self, tidy: str) -> tuple[np.ndarray, CounterTrace] | None:
        """(times, trace) of a counter by its tidy name, scaled to the tidy unit, from the raw readings where the
        table has them (so that every record is treated by today's rules), else from the stream column."""
        return self._cached("counter", tidy, lambda: self._counter(tidy))  # type: ignore[return-value]

    def _counter(self, tidy: str) -> tuple[np.ndarray, CounterTrace] | None:
        spec = next((c for c in GPU_COUNTERS if c.tidy == tidy), None)
        if spec is None:
            return None
        col = spec.raw if spec.raw in self.frame.columns else (spec.name if spec.name in self.frame.columns else None)
        if col is None:
            return None
        raw = self.frame[col]
        present = raw.notna().to_numpy()
        if not present.any():
            return None
        readings = raw[present]
        width = spec.counter_bits or infer_counter_width(readings)
        trace = counter_trace(readings.reset_index(drop=True), width)
        scaled = CounterTrace(trace.cumulative * spec.tidy_scale, trace.segment, trace.glitches, trace.resets,
                              trace.wraps, trace.invalid)
        return self.t[present], scaled

    # -- aggregates over a window ----------------------------------------------------------------------------

    def average(self, col: str, begin: float, end: float) -> float:
        """Time-weighted average of a column over the window (NaN if not covered)."""
        return time_average(*self.series(col), begin, end)

    def peak(self, col: str, begin: float, end: float, how: str = "max") -> float:
        """Peak (or minimum) of a column over the window (NaN if not covered)."""
        return peak(*self.series(col), begin, end, how)

    def loaded_average(self, col: str, begin: float, end: float) -> float:
        """Mean of a column over the samples inside the window taken under load (power >= :data:`LOADED_POWER_FRAC`
        of the same sample's power limit); NaN when the power, the limit or the column does not cover the window,
        or no sample was under load."""
        pcol = self.power_column()
        if pcol is None or "power_limit_w" not in self.frame.columns or col not in self.frame.columns:
            return float("nan")
        if any(clip_window(self.series(c)[0], begin, end) is None for c in (pcol, col)):
            return float("nan")
        inside = (self.t >= begin) & (self.t <= end)
        power, limit = valid_readings(self.frame[pcol]), valid_readings(self.frame["power_limit_w"])
        value = valid_readings(self.frame[col])
        loaded = inside & (power >= LOADED_POWER_FRAC * limit) & ~np.isnan(value)
        return float(value[loaded].mean()) if loaded.any() else float("nan")

    def temperature_drift(self, begin: float, end: float) -> tuple[float, float]:
        """(slope in °C/min, drift in °C) of the die temperature over the measured window ``[begin, end]``: the
        least-squares slope over the window extended back to :data:`calorimeter.records.steadiness.FIT_MIN_S`
        where shorter, and the change it implies over the window (NaN where the readings do not cover the fit)."""
        slope = lsq_slope_c_per_min(*self.series("gpu_temp_c"), fit_begin(begin, end), end)
        return slope, drift_c(slope, end - begin)

    def power_window(self, begin: float, end: float) -> tuple[float, float] | None:
        """The window clipped to the power samples, or None if they do not cover it."""
        pcol = self.power_column()
        return clip_window(self.series(pcol)[0], begin, end) if pcol else None

    def trapezoid_energy_j(self, begin: float, end: float) -> float:
        """Energy from the trapezoid of power over ``[begin, end]`` (inside the power samples)."""
        pcol = self.power_column()
        return integral(*self.series(pcol), begin, end) if pcol else float("nan")

    def counter_window(self, tidy: str, begin: float, end: float) -> tuple[float, float]:
        """(increase, seconds covered) of a counter over the window (NaN if absent or not covered)."""
        c = self.counter(tidy)
        return counter_delta(c[0], c[1], begin, end) if c is not None else (float("nan"), float("nan"))

    def throttle_shares(self, begin: float, end: float) -> dict[str, float]:
        """``throttle_<reason>_frac`` from the sampled bitmask and ``throttle_<reason>_counter_frac`` from the
        driver's accumulated time."""
        t, masks = self.series("clock_event_reasons")
        bits = hold_shares(t, masks, begin, end)
        out = {f"throttle_{name}_frac": bits[bit] for bit, name in CLOCK_EVENT_REASON_BITS.items()}
        for reason in ACCUMULATED_REASON_FIELDS:
            ns, covered = self.counter_window(_acc_col(reason), begin, end)
            out[f"throttle_{reason}_counter_frac"] = ns / 1e9 / covered if covered > 0 else float("nan")
        return out

    def quality(self, begin: float, end: float) -> WindowQuality:
        """Data quality of the window (see the module docstring and QUALITY_COLUMNS)."""

        def within(times: np.ndarray) -> int:
            return int(((times >= begin) & (times <= end)).sum())

        span = end - begin
        d = np.diff(self.t)
        long = d > self.max_gap_s
        gap_len = np.clip(np.minimum(self.t[1:], end) - np.maximum(self.t[:-1], begin), 0.0, None) * long
        errors = sum(within(self.errors_t(c)) for c in EVERY_SAMPLE)
        glitches = resets = 0
        notes: list[str] = []
        for spec in GPU_COUNTERS:
            c = self.counter(spec.tidy)
            if c is None:
                continue
            t, trace = c
            invalid = trace.invalid if trace.invalid is not None else np.zeros(t.size, dtype=bool)
            g = within(t[~trace.kept & ~invalid])
            e = within(t[invalid])
            cuts = [(t[trace.segment == s - 1].max(), t[trace.segment == s].min())
                    for s in range(1, int(trace.segment.max()) + 1)]
            r = sum(1 for a, b in cuts if b >= begin and a <= end)
            if g or r or e:
                said = ([f"{e} NVML error(s) (negative or all-ones reading) dropped"] * bool(e)
                        + [f"{g} glitch(es) dropped"] * bool(g) + [f"{r} reset(s)"] * bool(r))
                notes.append(f"{spec.name}: {', '.join(said)}")
            glitches, resets, errors = glitches + g, resets + r, errors + e
        pcol = self.power_column()
        power_cov = coverage_s(self.series(pcol)[0], begin, end, self.max_gap_s) / span if pcol and span > 0 else 0.0
        energy = self.counter("energy_j")
        energy_cov = (self.counter_window("energy_j", begin, end)[1] / span if energy is not None and span > 0
                      else float("nan"))
        if energy is not None and energy_cov != energy_cov:  # under MIN_COVERAGE: say how much it covered
            t, trace = energy
            energy_cov = sum(max(0.0, min(end, t[trace.segment == s].max()) - max(begin, t[trace.segment == s].min()))
                             for s in np.unique(trace.segment[trace.segment >= 0])) / span
        q = WindowQuality(
            window_s=span,
            samples_expected=float(np.floor(span / self.period_s)) if self.period_s == self.period_s else float("nan"),
            samples_received=within(self.t),
            gaps=int((gap_len > 0).sum()),
            gap_s=float(gap_len.sum()),
            nvml_errors=errors,
            duplicate_timestamps=within(self._duplicate_t),
            out_of_order_timestamps=within(self._late_t),
            counter_glitches=glitches,
            counter_resets=resets,
            power_coverage_frac=power_cov,
            energy_counter_coverage_frac=energy_cov,
        )
        if q.gaps:
            notes.insert(0, f"{q.gaps} gap(s) > {self.max_gap_s * 1e3:.0f} ms ({q.gap_s * 1e3:.0f} ms in all)")
        if q.samples_received < MIN_COVERAGE * q.samples_expected:
            notes.append(f"{q.samples_received} of {q.samples_expected:.0f} expected samples")
        for n, what in ((errors, "NVML error(s) dropped"), (q.duplicate_timestamps, "duplicate timestamp(s) dropped"),
                        (q.out_of_order_timestamps, "out-of-order timestamp(s) re-sorted")):
            if n:
                notes.append(f"{n} {what}")
        if power_cov < MIN_COVERAGE:
            notes.append(f"power observed over {power_cov:.0%} of the window")
        if energy_cov == energy_cov and energy_cov < MIN_COVERAGE:
            notes.append(f"energy counter covers {energy_cov:.0%} of the window")
        return WindowQuality(**{**q.__dict__, "notes": tuple(notes)})

    def window_stats(self, begin: float, end: float) -> dict[str, float | str | int]:
        """Every statistic of this GPU over ``[begin, end]``.

        Returns:
            ``power_source``, ``power_avg_w``, ``power_peak_w``, ``<gauge>_avg_<unit>``, ``<gauge>_peak_<unit>``
            (``sm_clock_min_mhz`` too, and ``sm_clock_loaded_avg_mhz``: :meth:`loaded_average`);
            ``temp_slope_c_per_min`` and ``temp_drift_c``
            (:meth:`temperature_drift`); ``energy_counter_j`` (counter increase over ``energy_window_s``, the span
            both energy estimates cover, excluding a reset's cut) with ``energy_counter_s`` (the seconds it
            covers), ``energy_trapezoid_j`` (trapezoid of power over ``energy_window_s``), ``energy_rel_diff`` =
            relative difference of the mean powers they give; the link byte totals; the throttle shares; and the
            data-quality columns (QUALITY_COLUMNS, ``data_quality``, ``quality_notes``).
        """
        pcol = self.power_column()
        row: dict[str, float | str | int] = {"power_source": pcol or ""}
        row["power_avg_w"] = self.average(pcol, begin, end) if pcol else float("nan")
        row["power_peak_w"] = self.peak(pcol, begin, end) if pcol else float("nan")
        for col, prefix in GAUGES:
            unit = GAUGE_UNITS[prefix]
            row[f"{prefix}_avg_{unit}"] = self.average(col, begin, end)
            row[f"{prefix}_peak_{unit}"] = self.peak(col, begin, end)
            if prefix == "sm_clock":
                row["sm_clock_min_mhz"] = self.peak(col, begin, end, "min")
                row["sm_clock_loaded_avg_mhz"] = self.loaded_average(col, begin, end)
        row["temp_slope_c_per_min"], row["temp_drift_c"] = self.temperature_drift(begin, end)
        wp = self.power_window(begin, end)
        energy = self.counter("energy_j")
        we = None
        if energy is not None and not np.isnan(self.counter_window("energy_j", begin, end)[0]):
            te = energy[0][energy[1].kept]
            we = (max(begin, float(te[0])), min(end, float(te[-1])))
        # both estimates over the span both cover, so that they can be compared
        if wp is not None and we is not None and min(wp[1], we[1]) > max(wp[0], we[0]):
            b, e = max(wp[0], we[0]), min(wp[1], we[1])
        else:
            b, e = wp if wp is not None else (we if we is not None else (float("nan"), float("nan")))
        row["energy_window_s"] = e - b
        c, cs = self.counter_window("energy_j", b, e) if we is not None else (float("nan"), float("nan"))
        row["energy_counter_j"], row["energy_counter_s"] = c, cs
        row["energy_trapezoid_j"] = self.trapezoid_energy_j(b, e) if wp is not None else float("nan")
        i, iw = row["energy_trapezoid_j"], row["energy_window_s"]
        row["energy_rel_diff"] = ((i / iw) / (c / cs) - 1.0 if c == c and i == i and c > 0 and cs > 0
                                  else float("nan"))
        for name in LINK_COUNTERS:
            row[name] = self.counter_window(name, begin, end)[0]
        row.update(self.throttle_shares(begin, end))
        quality = self.quality(begin, end)
        row.update(quality.to_dict())
        counter_cov = quality.energy_counter_coverage_frac
        if (pcol and quality.power_coverage_frac < MIN_COVERAGE and counter_cov >= MIN_COVERAGE and c == c
                and cs > 0):
            row["power_avg_w"], row["power_source"] = c / cs, "energy_counter"
            note = (f"average power from the energy counter: {pcol} observed over {quality.power_coverage_frac:.0%} "
                    "of the window")
            row["quality_notes"] = f"{row['quality_notes']}; {note}" if row["quality_notes"] else note
        return row
