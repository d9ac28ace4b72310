"""Decoding of the NVML clock-event (throttle) reason bitmask.

NVML reports why the SM clock is below its maximum as a 64-bit mask
(``nvmlDeviceGetCurrentClocksEventReasons``, formerly ``...ThrottleReasons``); the bit values are pynvml's
``nvmlClocksThrottleReason*`` constants (the same bits as ``nvmlClocksEventReason*``, present in every nvidia-ml-py).
"""

from __future__ import annotations

from collections.abc import Iterable

import pynvml

#: Bit value -> reason name, in bit order (the names are the ``throttle_<name>`` columns of the tables).
CLOCK_EVENT_REASON_BITS: dict[int, str] = {
    pynvml.nvmlClocksThrottleReasonGpuIdle: "gpu_idle",
    pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting: "applications_clocks_setting",
    pynvml.nvmlClocksThrottleReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksThrottleReasonHwSlowdown: "hw_slowdown",
    pynvml.nvmlClocksThrottleReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksThrottleReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown: "hw_power_brake",
    pynvml.nvmlClocksThrottleReasonDisplayClockSetting: "display_clock_setting",
}

#: Every named reason, in bit order.
REASON_NAMES: tuple[str, ...] = tuple(CLOCK_EVENT_REASON_BITS.values())

_KNOWN_MASK = sum(CLOCK_EVENT_REASON_BITS)


def decode_clock_event_reasons(mask: int | None) -> list[str]:
    """Decode a clock-event reason bitmask into reason names.

    Args:
        mask: The raw bitmask, or None when it was not read.

    Returns:
        The names of the set bits in bit order. Bits without a name are reported as
        ``"unknown_0x<hex>"`` (one entry holding all of them). ``[]`` for 0 or None.
    """
    if mask is None:
        return []
    mask = int(mask)
    if mask < 0:
        raise ValueError(f"reason mask must be non-negative, got {mask}")
    names = [name for bit, name in CLOCK_EVENT_REASON_BITS.items() if mask & bit]
    unknown = mask & ~_KNOWN_MASK
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return names


def reason_flags(mask: int | None) -> dict[str, bool | None]:
    """Return one boolean per named reason (all None when the mask is missing).

    Args:
        mask: The raw bitmask, or None.

    Returns:
        Mapping ``reason name -> bool`` (or None for a missing mask).
    """
    if mask is None:
        return {name: None for name in REASON_NAMES}
    return {name: bool(int(mask) & bit) for bit, name in CLOCK_EVENT_REASON_BITS.items()}


def reason_fractions(masks: Iterable[int | None]) -> dict[str, float]:
    """Fraction of (non-missing) samples in which each reason was set.

    Args:
        masks: Raw bitmasks; None entries are skipped.

    Returns:
        Mapping ``reason name -> fraction in [0, 1]``; NaN for every reason when no sample is present.
    """
    valid = [int(m) for m in masks if m is not None and m == m]  # m == m drops NaN
    if not valid:
        return {name: float("nan") for name in REASON_NAMES}
    return {name: sum(1 for m in valid if m & bit) / len(valid) for bit, name in CLOCK_EVENT_REASON_BITS.items()}
