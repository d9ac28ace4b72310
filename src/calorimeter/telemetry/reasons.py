"""NVML's clock-event (throttle) reasons, named from pynvml's own constants.

NVML reports why the SM clock is below its maximum in two ways, both read by the node sampler:

* a bitmask at the moment of the read (``nvmlDeviceGetCurrentClocksEventReasons``, formerly ``...ThrottleReasons``):
  the bits are pynvml's ``nvmlClocksEventReason*`` constants (and the legacy ``nvmlClocksThrottleReason*`` ones that
  have no new name, e.g. ``BoardLimit``);
* accumulated time per reason, kept by the driver since it loaded (field values
  ``NVML_FI_DEV_CLOCKS_EVENT_REASON_*``, in nanoseconds), so that the share of a window's time spent throttled does
  not depend on the sampling period.

Names are the constants' names in snake case (``SwPowerCap`` -> ``sw_power_cap``); an accumulated field is matched
to its bit by the same words (``SW_THERM_SLOWDOWN`` is the ``SwThermalSlowdown`` bit).
"""

from __future__ import annotations

import re

import pynvml

_BIT_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_FIELD_PREFIX = "NVML_FI_DEV_CLOCKS_EVENT_REASON_"
_NOT_A_REASON = ("All", "None")


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _canonical(name: str) -> str:
    """Words of a reason name without separators, with NVML's two spellings of thermal made one."""
    return re.sub(r"thermal", "therm", name.replace("_", "").lower())


def _reason_bits() -> dict[int, str]:
    """Bit -> name from pynvml: the new ``nvmlClocksEventReason*`` names first, legacy ones for the other bits; of
    two names for one bit (an alias such as ``UserDefinedClocks``) the alphabetically first."""
    bits: dict[int, str] = {}
    for prefix in _BIT_PREFIXES:
        found: dict[int, list[str]] = {}
        for attr in dir(pynvml):
            suffix = attr[len(prefix):]
            if attr.startswith(prefix) and suffix not in _NOT_A_REASON and isinstance(getattr(pynvml, attr), int):
                value = int(getattr(pynvml, attr))
                if value and value & (value - 1) == 0:  # one bit
                    found.setdefault(value, []).append(suffix)
        for value, names in found.items():
            bits.setdefault(value, _snake(sorted(names)[0]))
    return dict(sorted(bits.items()))


#: Bit value -> reason name, in bit order (from pynvml's constants).
CLOCK_EVENT_REASON_BITS: dict[int, str] = _reason_bits()

#: Every named reason, in bit order.
REASON_NAMES: tuple[str, ...] = tuple(CLOCK_EVENT_REASON_BITS.values())
#: Reasons that hold the clock below what the load asks for (idle and the clock-setting reasons are not).
THROTTLING: tuple[str, ...] = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                               "hw_power_brake_slowdown")


def _accumulated_fields() -> dict[str, str]:
    """Reason name -> pynvml name of the field holding its accumulated time (``NVML_FI_DEV_CLOCKS_EVENT_REASON_*``)."""
    by_canon = {_canonical(n): n for n in REASON_NAMES}
    out: dict[str, str] = {}
    for attr in sorted(dir(pynvml)):
        if attr.startswith(_FIELD_PREFIX):
            name = by_canon.get(_canonical(attr[len(_FIELD_PREFIX):]))
            if name is not None:
                out[name] = attr
    return {n: out[n] for n in REASON_NAMES if n in out}


#: Reason name -> pynvml constant of the field with the driver's accumulated time for it (ns since it loaded).
ACCUMULATED_FIELD_NAMES: dict[str, str] = _accumulated_fields()
#: Reason name -> NVML field id of that field.
ACCUMULATED_REASON_FIELDS: dict[str, int] = {r: int(getattr(pynvml, f)) for r, f in ACCUMULATED_FIELD_NAMES.items()}


def accumulated_column(reason: str) -> str:
    """Sample column of a reason's accumulated time: ``throttle_<reason>_ns``."""
    return f"throttle_{reason}_ns"


#: Sample columns of the accumulated times, in bit order.
ACCUMULATED_COLUMNS: tuple[str, ...] = tuple(accumulated_column(n) for n in ACCUMULATED_REASON_FIELDS)

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
