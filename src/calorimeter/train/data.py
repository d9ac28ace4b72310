"""Training samples, deterministic per (seed, global sample index) so every parallel layout sees the same data.

Step ``s`` uses the global samples ``[s * global_batch, (s + 1) * global_batch)``; data-parallel rank ``r`` takes
the contiguous slice ``[r * per_rank, (r + 1) * per_rank)`` of it (``per_rank = micro_batch * grad_accum``), cut
into ``grad_accum`` micro-batches in order. A sample is ``seq_len + 1`` tokens: inputs are the first ``seq_len``,
labels the last ``seq_len``.

Two sources:

* :class:`SyntheticTokens`: a seeded "phrase book". A fixed table of random phrases (short token strings) is drawn
  once from the seed; each sample concatenates phrases picked with Zipf-like frequencies (like words in text).
  Frequent phrases and within-phrase continuations are predictable, so the loss falls from ``ln(vocab)`` within a
  few steps on a tiny model (learnable), and generation is vectorised (no per-token Python loop).
* :class:`TokenFile`: a pre-tokenized corpus ``<prefix>.bin`` (a flat array of token ids) described by
  ``<prefix>.json`` (``{"dtype": "uint16"|"uint32"|..., "vocab_size": ...}``) or a Megatron ``<prefix>.idx``
  (only its dtype is read). Samples are non-overlapping ``seq_len + 1`` windows, visited in a seeded random
  order per epoch. :func:`write_token_file` writes such a dataset.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from calorimeter.plan.cell import Cell, batch_reason
from calorimeter.records.atomic import write_atomic

PHRASES = 256
PHRASE_TOKENS = 8
ZIPF_EXPONENT = 1.2
_TABLE_STREAM = 0x5EED
_SAMPLE_STREAM = 0xDA7A

# Megatron's IndexedDataset dtype codes (megatron/core/datasets/indexed_dataset.py, DType enum).
_MEGATRON_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_TOKEN_DTYPES = ("uint8", "uint16", "int16", "int32", "uint32", "int64")


class SampleSource(Protocol):
    """Anything that returns the tokens of global samples."""

    def samples(self, start: int, count: int) -> np.ndarray:
        """Samples ``start .. start + count - 1`` as an int64 array ``(count, seq_len + 1)``."""
        ...


class SyntheticTokens:
    """Learnable seeded synthetic tokens (see the module docstring).

    Args:
        vocab_size: token ids are drawn from ``[0, vocab_size)``.
        seq_len: tokens per training sequence (samples hold ``seq_len + 1``).
        seed: decides both the phrase table and every sample.
        num_phrases: phrases in the table.
        phrase_tokens: tokens per phrase.
        zipf_exponent: phrase ``k`` (0-based) is picked with probability proportional to ``(k + 1) ** -zipf_exponent``.
    """

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        seed: int,
        num_phrases: int = PHRASES,
        phrase_tokens: int = PHRASE_TOKENS,
        zipf_exponent: float = ZIPF_EXPONENT,
    ) -> None:
        if vocab_size < 2 or seq_len < 1:
            raise ValueError(f"need vocab_size >= 2 and seq_len >= 1, got {vocab_size}, {seq_len}")
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.seed = seed
        self.phrase_tokens = phrase_tokens
        table_rng = np.random.default_rng([seed, _TABLE_STREAM])
        self.table = table_rng.integers(0, vocab_size, size=(num_phrases, phrase_tokens), dtype=np.int64)
        weights = 1.0 / np.arange(1, num_phrases + 1, dtype=np.float64) ** zipf_exponent
        self._cdf = np.cumsum(weights / weights.sum())
        self._phrases_per_sample = -(-(seq_len + 1) // phrase_tokens) + 1

    def sample(self, index: int) -> np.ndarray:
        """Global sample ``index``: ``seq_len + 1`` tokens, a pure function of (seed, index)."""
        rng = np.random.default_rng([self.seed, _SAMPLE_STREAM, index])
        picks = np.minimum(np.searchsorted(self._cdf, rng.random(self._phrases_per_sample)), len(self.table) - 1)
        offset = int(rng.integers(0, self.phrase_tokens))
        return self.table[picks].reshape(-1)[offset : offset + self.seq_len + 1]

    def samples(self, start: int, count: int) -> np.ndarray:
        """Samples ``start .. start + count - 1`` stacked ``(count, seq_len + 1)``."""
        return np.stack([self.sample(start + i) for i in range(count)])


class TokenFile:
    """Non-overlapping ``seq_len + 1`` windows of a memory-mapped token file, in a seeded order per epoch.

    Args:
        prefix: path prefix; reads ``<prefix>.bin`` and ``<prefix>.json`` or ``<prefix>.idx``.
        seq_len: tokens per training sequence.
        seed: decides the window order (a fresh permutation per epoch over the windows).
        vocab_size: if given, token ids must be below it.

    Raises:
        ValueError: naming the path, if the files are missing, malformed or too short.
    """

    def __init__(self, prefix: str | Path, seq_len: int, seed: int, vocab_size: int | None = None) -> None:
        self.prefix = str(prefix)
        self.seq_len = seq_len
        self.seed = seed
        self.vocab_size = vocab_size
        dtype, meta_vocab = read_token_file_meta(prefix)
        if vocab_size is not None and meta_vocab is not None and meta_vocab > vocab_size:
            raise ValueError(f"{self.prefix}: dataset vocab_size {meta_vocab} exceeds the model's {vocab_size}")
        bin_path = Path(self.prefix + ".bin")
        size = bin_path.stat().st_size
        if size % dtype.itemsize:
            raise ValueError(f"{bin_path}: size {size} bytes is not a multiple of {dtype} ({dtype.itemsize} bytes)")
        self.tokens = np.memmap(bin_path, dtype=dtype, mode="r") if size else np.zeros(0, dtype)
        self.num_windows = (len(self.tokens) - 1) // seq_len if len(self.tokens) else 0
        if self.num_windows < 1:
            raise ValueError(f"{bin_path}: {len(self.tokens)} tokens, fewer than one window of {seq_len + 1}")
        self._perm_epoch = -1
        self._perm = np.zeros(0, dtype=np.int64)

    def _window(self, index: int) -> int:
        epoch, pos = divmod(index, self.num_windows)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)
            self._perm_epoch = epoch
        return int(self._perm[pos])

    def sample(self, index: int) -> np.ndarray:
        """Global sample ``index``: window ``perm_epoch[index % num_windows]``, ``seq_len + 1`` tokens."""
        start = self._window(index) * self.seq_len
        out = np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int64)
        if self.vocab_size is not None and out.size and (out.max() >= self.vocab_size or out.min() < 0):
            raise ValueError(f"{self.prefix}.bin: token ids outside [0, {self.vocab_size}) in sample {index}")
        return out

    def samples(self, start: int, count: int) -> np.ndarray:
        """Samples ``start .. start + count - 1`` stacked ``(count, seq_len + 1)``."""
        return np.stack([self.sample(start + i) for i in range(count)])


def read_token_file_meta(prefix: str | Path) -> tuple[np.dtype, int | None]:
    """The token dtype (and vocab size when recorded) of the dataset at ``prefix``.

    Reads ``<prefix>.json`` if present, else the header of a Megatron ``<prefix>.idx``.

    Raises:
        ValueError: naming the path, if ``<prefix>.bin`` or both descriptions are missing or unreadable.
    """
    prefix = str(prefix)
    bin_path, json_path, idx_path = Path(prefix + ".bin"), Path(prefix + ".json"), Path(prefix + ".idx")
    if not bin_path.is_file():
        raise ValueError(f"dataset {prefix!r}: {bin_path} does not exist (expected a pre-tokenized <prefix>.bin)")
    if json_path.is_file():
        try:
            meta = json.loads(json_path.read_text())
            dtype = np.dtype(meta["dtype"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{json_path}: not a dataset description with a valid 'dtype' ({e})") from None
        if dtype.name not in _TOKEN_DTYPES:
            raise ValueError(f"{json_path}: dtype {dtype.name!r} is not an integer token dtype {_TOKEN_DTYPES}")
        vocab = meta.get("vocab_size")
        return dtype, int(vocab) if vocab is not None else None
    if idx_path.is_file():
        with idx_path.open("rb") as f:
            header = f.read(len(_MEGATRON_MAGIC) + 9)
        if len(header) < len(_MEGATRON_MAGIC) + 9 or not header.startswith(_MEGATRON_MAGIC):
            raise ValueError(f"{idx_path}: not a Megatron MMIDIDX index file")
        (code,) = struct.unpack("<B", header[len(_MEGATRON_MAGIC) + 8 :])
        dtype = _MEGATRON_DTYPES.get(code)
        if dtype is None or dtype.name not in _TOKEN_DTYPES:
            raise ValueError(f"{idx_path}: unsupported dtype code {code}")
        return dtype, None
    raise ValueError(f"dataset {prefix!r}: neither {json_path} nor {idx_path} exists to describe {bin_path}")


def write_token_file(prefix: str | Path, tokens: np.ndarray, vocab_size: int, dtype: str | None = None) -> Path:
    """Write ``tokens`` as ``<prefix>.bin`` plus a ``<prefix>.json`` description.

    Args:
        prefix: path prefix (parent directories are created).
        tokens: 1-D integer token ids.
        vocab_size: vocabulary size (recorded; ids must be below it).
        dtype: storage dtype; default uint16 if ``vocab_size <= 65536`` else uint32.

    Returns:
        The path of the ``.bin`` file.
    """
    dt = np.dtype(dtype or ("uint16" if vocab_size <= 65536 else "uint32"))
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or (tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size)):
        raise ValueError(f"{prefix}: tokens must be a 1-D array of ids in [0, {vocab_size})")
    bin_path = Path(str(prefix) + ".bin")
    write_atomic(bin_path, lambda tmp: tokens.astype(dt).tofile(tmp))
    text = json.dumps({"dtype": dt.name, "vocab_size": vocab_size, "num_tokens": int(tokens.size)}) + "\n"
    write_atomic(Path(str(prefix) + ".json"), lambda tmp: tmp.write_text(text))
    return bin_path


@dataclass(frozen=True)
class BatchLayout:
    """Where one data-parallel rank's micro-batches sit in the global sample order.

    Attributes:
        global_batch: samples per optimizer step over all data-parallel ranks.
        micro_batch: samples per micro-batch.
        dp_size: data-parallel ranks.
        dp_rank: this rank's data-parallel index.
    """

    global_batch: int
    micro_batch: int
    dp_size: int
    dp_rank: int

    def __post_init__(self) -> None:
        why = batch_reason(self.global_batch, self.micro_batch, self.dp_size)
        if why:
            raise ValueError(why)
        if not 0 <= self.dp_rank < self.dp_size:
            raise ValueError(f"dp_rank {self.dp_rank} outside [0, {self.dp_size})")

    @classmethod
    def of(cls, cell: Cell, dp_size: int, dp_rank: int) -> BatchLayout:
        """A cell's batch on one data-parallel rank of its engine, whose data-parallel size must be the cell's (so
        that the engine's micro-batches per step are the cell's ``grad_accum``)."""
        if dp_size != cell.dp:
            raise ValueError(f"{cell.cell_id}: the engine has {dp_size} data-parallel ranks, the cell {cell.dp}")
        return cls(cell.global_batch, cell.micro_batch, dp_size, dp_rank)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per rank per step."""
        return self.global_batch // (self.micro_batch * self.dp_size)

    def first_sample(self, step: int, micro: int) -> int:
        """Global index of the first sample of micro-batch ``micro`` of ``step`` on this rank."""
        per_rank = self.micro_batch * self.grad_accum
        return step * self.global_batch + self.dp_rank * per_rank + micro * self.micro_batch


def micro_batch(source: SampleSource, layout: BatchLayout, step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, labels)`` int64 CPU tensors ``(micro_batch, seq_len)`` of one micro-batch."""
    tokens = torch.from_numpy(source.samples(layout.first_sample(step, micro), layout.micro_batch))
    return tokens[:, :-1], tokens[:, 1:]


def micro_batches(
    source: SampleSource, layout: BatchLayout, first_step: int = 0, device: torch.device | str | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless micro-batches of this rank from ``first_step`` on, ``grad_accum`` per step, moved to ``device``.

    Host-to-device copies are non-blocking from pinned memory on CUDA.
    """
    cuda = device is not None and torch.device(device).type == "cuda"
    step = first_step
    while True:
        for m in range(layout.grad_accum):
            inputs, labels = micro_batch(source, layout, step, m)
            if device is not None:
                if cuda:
                    inputs, labels = inputs.contiguous().pin_memory(), labels.contiguous().pin_memory()
                inputs = inputs.to(device, non_blocking=cuda)
                labels = labels.to(device, non_blocking=cuda)
            yield inputs, labels
        step += 1


def make_source(dataset: str | None, vocab_size: int, seq_len: int, seed: int) -> SampleSource:
    """Synthetic tokens when ``dataset`` is None, else the pre-tokenized corpus at that path prefix."""
    if dataset is None:
        return SyntheticTokens(vocab_size, seq_len, seed)
    return TokenFile(dataset, seq_len, seed, vocab_size=vocab_size)
