"""Messages about bad input: the error type, key paths, short value reprs and "did you mean" suggestions."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class ConfigError(ValueError):
    """Bad user input (config file, sweep value, data path): printed without a traceback."""


def key_path(path: Sequence[Any]) -> str:
    """``("grid", 0, "tp")`` -> ``grid[0].tp`` (the spelling of every message and of the line maps)."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message never echoes megabytes of input."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 30]}... ({len(text):,} characters)"


def suggest(name: Any, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, or an empty string."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def locate(source: str, lines: Mapping[str, str] | None, path: str) -> str:
    """``file:line`` of a key path (or of its nearest enclosing key) where known, else ``source``.

    ``lines`` maps key paths to ``file:line`` (see :func:`calorimeter.plan.yamlfile.read_yaml`).
    """
    lines = lines or {}
    while path:
        if path in lines:
            return str(lines[path])
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return source
