"""Crash-tolerant Arrow IPC stream files: a chunked writer and a reader that accepts a torn tail.

The writer keeps rows in memory and appends them as one record batch at least every
``flush_interval_s``; each batch is followed by a flush of the file object, so a writer killed
with SIGKILL loses at most the rows gathered since the last flush. The reader returns every
complete batch and reports whether the stream ended cleanly (end-of-stream marker) or was cut.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from calorimeter.plan.json_types import JsonObject


class ChunkedStreamWriter:
    """Append rows to an Arrow IPC stream file in time-bounded chunks.

    Args:
        path: Output file (``.arrows``); created or truncated.
        schema: Arrow schema of the rows.
        flush_interval_s: Longest time rows stay in memory before being written.
        fsync: Also ``os.fsync`` after every batch (survives power loss, costs I/O time).
    """

    def __init__(self, path: str | Path, schema: pa.Schema, flush_interval_s: float = 0.5, fsync: bool = False):
        if flush_interval_s <= 0:
            raise ValueError("flush_interval_s must be positive")
        self.path = Path(path)
        self.schema = schema
        self.flush_interval_s = flush_interval_s
        self.fsync = fsync
        self._file = open(self.path, "wb")  # noqa: SIM115 - lives as long as the writer
        self._writer = pa.ipc.new_stream(self._file, schema)
        self._sync()  # the schema message is on disk before the first row
        self._cols: dict[str, list[Any]] = {name: [] for name in schema.names}
        self._n_pending = 0
        self._last_flush_mono = time.monotonic()
        self.rows_written = 0
        self.batches_written = 0

    def _sync(self) -> None:
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())

    def append(self, row: JsonObject) -> None:
        """Buffer one row (missing keys become null)."""
        for name, col in self._cols.items():
            col.append(row.get(name))
        self._n_pending += 1

    def maybe_flush(self, now_mono: float | None = None) -> bool:
        """Write the buffered rows if the flush interval has elapsed.

        Args:
            now_mono: Current ``time.monotonic()`` (read if None).

        Returns:
            True when a batch was written.
        """
        now = time.monotonic() if now_mono is None else now_mono
        if now - self._last_flush_mono >= self.flush_interval_s:
            return self.flush(now)
        return False

    def flush(self, now_mono: float | None = None) -> bool:
        """Write the buffered rows as one record batch and flush the file.

        Returns:
            True when there was something to write.
        """
        self._last_flush_mono = time.monotonic() if now_mono is None else now_mono
        if self._n_pending == 0:
            return False
        arrays = [pa.array(self._cols[f.name], type=f.type) for f in self.schema]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._writer.write_batch(batch)
        self._sync()
        self.rows_written += self._n_pending
        self.batches_written += 1
        for col in self._cols.values():
            col.clear()
        self._n_pending = 0
        return True

    def close(self) -> None:
        """Flush, write the end-of-stream marker and close the file."""
        if self._file.closed:
            return
        self.flush()
        self._writer.close()
        self._sync()
        self._file.close()

    def abandon(self) -> None:
        """Close the file without writing anything more (after a failed write, e.g. a full disk): the stream keeps
        the batches written so far; a batch cut by the failure is a torn tail, which readers tolerate."""
        if not self._file.closed:
            with contextlib.suppress(OSError):
                self._file.close()

    def __enter__(self) -> ChunkedStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class StreamRead:
    """Result of reading a possibly truncated stream.

    Attributes:
        table: Every complete record batch, concatenated.
        complete: True when the end-of-stream marker was found.
        n_batches: Number of complete batches read.
        error: Why reading stopped early (None when complete).
    """

    table: pa.Table
    complete: bool
    n_batches: int
    error: str | None


def read_stream(path: str | Path, schema: pa.Schema | None = None) -> StreamRead:
    """Read an Arrow IPC stream file, keeping every complete batch before a torn tail.

    Args:
        path: The ``.arrows`` file.
        schema: Schema for the empty table returned when not even the schema message is readable.

    Returns:
        A :class:`StreamRead`.
    """
    data = Path(path).read_bytes()
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as exc:
        empty = (schema or pa.schema([])).empty_table()
        return StreamRead(empty, False, 0, f"unreadable schema: {exc}")
    batches: list[pa.RecordBatch] = []
    error: str | None = None
    complete = False
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            complete = True
            break
        except (pa.ArrowInvalid, OSError) as exc:
            error = f"truncated after batch {len(batches)}: {exc}"
            break
    table = pa.Table.from_batches(batches, schema=reader.schema)
    if complete and not _ends_with_eos(data):
        # A stream cut exactly at a message boundary also ends in StopIteration.
        complete = False
        error = "no end-of-stream marker (writer did not close)"
    return StreamRead(table, complete, len(batches), error)


_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _ends_with_eos(data: bytes) -> bool:
    return data.endswith(_EOS)
