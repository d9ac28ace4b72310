"""Cumulative hardware counters turned into increases (pure functions, one definition for the whole project).

A counter that is narrow enough to wrap (32-bit PCIe/NVLink counters, RAPL at ``max_energy_range_uj``) is unwrapped:
a decrease is one wrap. A 64-bit counter never wraps in practice (NVML's energy counter in mJ would need about
580 million years at 1 kW), so a decrease there is a **glitch** (one reading off its neighbours' trend: dropped) or
a **reset** (driver reload, counter reset: the series is cut into segments and nothing is added across the cut).
Both are counted, never hidden, and 2^64 is never added. Integer readings keep full precision: increases are
computed on the integers before they become float64.

**Invalid readings** come first, for every counter alike (energy, PCIe, NVLink, accumulated throttle time, host
counters): a negative value (a broken read; older samplers stored NVML's ``-1``) or an all-ones value of the counter's
width (NVML's "not available": ``2^64 - 1``, or ``2^32 - 1`` for a 32-bit counter; ``2^64 - 1`` and above for any
counter, as no uint64 reading can be larger) is an NVML error. It is dropped and counted (:attr:`CounterTrace.errors`)
before anything else looks at the series, so it is never a glitch, a reset, a wrap or an increase.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd


@dataclass(frozen=True)
class CounterTrace:
    """A counter's readings (in time order) as a usable cumulative series.

    Attributes:
        cumulative: Increase since the first kept reading (float64, in the counter's unit); NaN where a reading is
            missing or was dropped as a glitch. A reset adds nothing: the increase across it is unknown.
        segment: Segment number of each kept reading (a new segment starts at each reset); -1 where not kept.
        glitches: Readings dropped because they left the trend of their neighbours and came back to it.
        resets: Decreases that persisted (the series is cut there).
        wraps: Decreases read as one wrap (wrapping counters only).
        invalid: Boolean mask of the readings dropped as NVML errors (negative or all-ones, see the module
            docstring); None when there were none.
    """

    cumulative: np.ndarray
    segment: np.ndarray
    glitches: int = 0
    resets: int = 0
    wraps: int = 0
    invalid: np.ndarray | None = None

    @property
    def errors(self) -> int:
        """Readings dropped as NVML errors (negative or all-ones)."""
        return int(self.invalid.sum()) if self.invalid is not None else 0

    @property
    def kept(self) -> np.ndarray:
        """Boolean mask of the readings used."""
        return self.segment >= 0


def _readings(values: npt.ArrayLike) -> list[int | float | None]:
    """Readings as exact Python numbers (integers where they are integral), None where missing."""
    s = pd.Series(values)
    if pd.api.types.is_integer_dtype(s.dtype):
        return [None if pd.isna(x) else int(x) for x in s.astype("object")]
    f = pd.to_numeric(s, errors="coerce").astype("float64").to_numpy()
    return [None if np.isnan(x) else (int(x) if x.is_integer() and abs(x) < 2.0**53 else float(x)) for x in f]


#: NVML's "not available" for any counter: all ones of a 64-bit value (no valid uint64 reading is larger)
ALL_ONES_64 = 2**64 - 1


def invalid_reading(v: int | float, width_bits: int = 64) -> bool:
    """Whether one reading is an NVML error: negative, or all-ones of the counter's width (``width_bits``: 32 or
    64; any other width only checks the 64-bit value) or larger than any uint64."""
    return v < 0 or v >= ALL_ONES_64 or (width_bits == 32 and v == 2**32 - 1)


def _drop_invalid(vals: list[int | float | None], width_bits: int) -> tuple[list[int | float | None], np.ndarray]:
    """(readings with the invalid ones as None, mask of the invalid ones)."""
    bad = np.fromiter((v is not None and invalid_reading(v, width_bits) for v in vals), dtype=bool, count=len(vals))
    if not bad.any():
        return vals, bad
    return [None if b else v for v, b in zip(vals, bad, strict=True)], bad


def uint64_readings(values: npt.ArrayLike) -> pd.api.extensions.ExtensionArray:
    """Readings as a ``UInt64`` array at full precision (the tidy table's ``<counter>_raw``): a negative or too large
    reading (older float streams) becomes NVML's all-ones "not available", so that it stays an NVML error."""
    vals = _readings(values)
    return pd.array([None if v is None else (ALL_ONES_64 if invalid_reading(v) else int(v)) for v in vals],
                    dtype="UInt64")


def _monotone(vals: list[int | float | None]) -> CounterTrace | None:
    """The common case without any decrease, vectorised (None when a decrease needs the full treatment)."""
    present = np.fromiter((v is not None for v in vals), dtype=bool, count=len(vals))
    kept = [v for v in vals if v is not None]
    if all(isinstance(v, int) for v in kept) and all(0 <= v < 2**64 for v in kept):
        arr = np.asarray(kept, dtype=np.uint64)
        if arr.size > 1 and bool((arr[1:] < arr[:-1]).any()):
            return None
        inc = np.diff(arr).astype(np.float64) if arr.size > 1 else np.empty(0)
    else:
        arr = np.asarray(kept, dtype=np.float64)
        inc = np.diff(arr)
        if (inc < 0).any():
            return None
    cumulative = np.full(len(vals), np.nan)
    segment = np.full(len(vals), -1, dtype=np.int64)
    cumulative[present] = np.concatenate(([0.0], np.cumsum(inc))) if arr.size else np.empty(0)
    segment[present] = 0
    return CounterTrace(cumulative, segment)


def counter_trace(values: npt.ArrayLike, width_bits: int = 64, modulus: float | None = None) -> CounterTrace:
    """Increases of a cumulative counter from its readings in time order.

    Args:
        values: Raw readings in time order (integers, e.g. a ``UInt64`` column, or floats); NaN/NA = missing.
        width_bits: 32 for counters that wrap at 2^32; 64 for counters that never wrap (a decrease is a glitch or a
            reset, see the module docstring).
        modulus: Wrap value when it is not a power of two (RAPL: ``max_energy_range_uj + 1``): the counter wraps.

    Returns:
        A :class:`CounterTrace` with one entry per reading; invalid readings (NVML errors) are dropped first and
        marked in ``invalid``.
    """
    vals, bad = _drop_invalid(_readings(values), width_bits if modulus is None else 64)
    trace = _trace(vals, width_bits, modulus)
    if not bad.any():
        return trace
    return CounterTrace(trace.cumulative, trace.segment, trace.glitches, trace.resets, trace.wraps, bad)


def _trace(vals: list[int | float | None], width_bits: int, modulus: float | None) -> CounterTrace:
    """:func:`counter_trace` of valid readings."""
    fast = _monotone(vals)
    if fast is not None:
        return fast
    n = len(vals)
    cumulative = np.full(n, np.nan)
    segment = np.full(n, -1, dtype=np.int64)
    idx = [i for i, v in enumerate(vals) if v is not None]
    if not idx:
        return CounterTrace(cumulative, segment)
    wrap = modulus if modulus is not None else (2**width_bits if width_bits < 64 else None)
    glitches = resets = wraps = 0
    kept: list[int] = [idx[0]]  # reading indices kept, in order
    seg_of: dict[int, int] = {idx[0]: 0}
    inc_of: dict[int, int | float] = {idx[0]: 0}
    seg = 0
    j = 1
    while j < len(idx):
        k = idx[j]
        prev = kept[-1]
        v, pv = vals[k], vals[prev]
        if v >= pv:
            kept.append(k)
            seg_of[k], inc_of[k] = seg, v - pv
            j += 1
            continue
        if wrap is not None:  # a wrapping counter: one wrap
            kept.append(k)
            seg_of[k], inc_of[k] = seg, v + wrap - pv
            wraps += 1
            j += 1
            continue
        nxt = vals[idx[j + 1]] if j + 1 < len(idx) else None
        if nxt is not None and nxt >= pv:  # a dip: this reading is off the trend the next one continues
            glitches += 1
            j += 1
            continue
        before = kept[-2] if len(kept) > 1 and seg_of[kept[-2]] == seg else None
        if before is not None and v >= vals[before]:  # a spike: the previous reading was off the trend
            glitches += 1
            kept.pop()
            continue  # re-evaluate this reading against the one before the spike
        resets += 1  # a reset: a new segment starts here, nothing is added across the cut
        seg += 1
        kept.append(k)
        seg_of[k], inc_of[k] = seg, 0
        j += 1
    order = np.asarray(kept, dtype=np.int64)
    inc = np.asarray([float(inc_of[k]) for k in kept])
    cumulative[order] = np.cumsum(inc)
    segment[order] = [seg_of[k] for k in kept]
    return CounterTrace(cumulative, segment, glitches, resets, wraps)


def infer_counter_width(values: npt.ArrayLike) -> int:
    """A counter's width when the source does not say: 32 if every reading fits in uint32, else 64.

    Args:
        values: Raw readings (missing ones and NVML errors, i.e. negative or 64-bit all-ones, ignored).

    Returns:
        32 or 64.
    """
    vals = _readings(values)
    return 64 if any(v is not None and not invalid_reading(v) and v >= 2**32 for v in vals) else 32


def unwrap_counter(values: npt.ArrayLike, width_bits: int = 64, modulus: float | None = None) -> np.ndarray:
    """The readings as a monotone series starting at the first reading (see :func:`counter_trace`).

    Args:
        values: Raw readings in time order (NaN = missing).
        width_bits: Counter width in bits.
        modulus: Wrap value overriding ``width_bits``.

    Returns:
        ``first reading + cumulative increase`` (float64), NaN where missing or dropped.
    """
    trace = counter_trace(values, width_bits, modulus)
    vals = _readings(values)
    first = next((v for v, k in zip(vals, trace.kept, strict=True) if v is not None and k), None)
    return trace.cumulative + (float(first) if first is not None else 0.0)
