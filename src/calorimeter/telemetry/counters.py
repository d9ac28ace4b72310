"""Wrap-around handling for cumulative hardware counters (pure functions)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def counter_deltas(values: npt.ArrayLike, width_bits: int = 64, modulus: float | None = None) -> np.ndarray:
    """Successive increments of a cumulative counter that wraps at ``2**width_bits`` (or ``modulus``).

    A decrease ``v[k] < v[k-1]`` is read as exactly one wrap:
    ``delta = 2**width_bits - v[k-1] + v[k]``. Missing samples (NaN) give a NaN delta for both
    neighbouring intervals; the increment across a gap is attributed to the next valid pair
    by :func:`unwrap_counter`.

    Args:
        values: Raw counter readings in sample order (float, NaN = missing).
        width_bits: Counter width in bits (32 for uint32 counters, 64 for uint64).
        modulus: Wrap value when it is not a power of two (e.g. RAPL ``max_energy_range_uj + 1``);
            overrides ``width_bits``.

    Returns:
        Array of length ``len(values) - 1`` (empty for fewer than two samples).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return np.empty(0, dtype=np.float64)
    d = np.diff(v)
    wrapped = d < 0
    d[wrapped] = d[wrapped] + (float(modulus) if modulus is not None else float(2**width_bits))
    return d


def unwrap_counter(values: npt.ArrayLike, width_bits: int = 64, modulus: float | None = None) -> np.ndarray:
    """Turn raw wrapping counter readings into a monotone cumulative series.

    The first valid reading is kept as is; every later valid reading becomes the previous
    unwrapped value plus the (wrap-corrected) increment from the previous *valid* reading.
    Missing readings stay NaN.

    Args:
        values: Raw counter readings in sample order (NaN = missing).
        width_bits: Counter width in bits.
        modulus: Wrap value overriding ``width_bits`` (see :func:`counter_deltas`).

    Returns:
        The unwrapped series, same length as ``values``.
    """
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(v))
    if valid.size == 0:
        return out
    vv = v[valid]
    inc = counter_deltas(vv, width_bits, modulus)
    out[valid] = vv[0] + np.concatenate(([0.0], np.cumsum(inc)))
    return out


def infer_counter_width(values: npt.ArrayLike) -> int:
    """Guess a counter's width: 32 if every reading fits in uint32, else 64.

    Args:
        values: Raw readings (NaN ignored).

    Returns:
        32 or 64.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size and float(v.max()) >= 2.0**32:
        return 64
    return 32
