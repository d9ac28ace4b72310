"""Errors a training cell reports to its caller."""

from __future__ import annotations


class CellOOMError(RuntimeError):
    """The cell ran out of accelerator memory; the caller records status ``oom``.

    Args:
        peak_memory_bytes: the rank's peak allocated memory when it failed.
        detail: the original error message.
    """

    def __init__(self, peak_memory_bytes: int, detail: str = "") -> None:
        self.peak_memory_bytes = int(peak_memory_bytes)
        self.detail = detail
        suffix = f": {detail}" if detail else ""
        super().__init__(f"out of memory (peak {self.peak_memory_bytes} bytes allocated){suffix}")

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        return (type(self), (self.peak_memory_bytes, self.detail))
