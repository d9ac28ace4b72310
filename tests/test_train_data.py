"""Data of calorimeter.train: deterministic synthetic tokens, batch layout, the memmap token-file loader."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from calorimeter.train.data import (
    BatchLayout,
    SyntheticTokens,
    TokenFile,
    make_source,
    micro_batch,
    micro_batches,
    read_token_file_meta,
    write_token_file,
)


def test_synthetic_samples_are_a_function_of_seed_and_index() -> None:
    a, b = SyntheticTokens(512, 64, seed=7), SyntheticTokens(512, 64, seed=7)
    assert np.array_equal(a.samples(100, 4), b.samples(100, 4))
    assert np.array_equal(a.samples(100, 4)[2], b.sample(102))
    assert a.samples(0, 1).shape == (1, 65) and a.samples(0, 1).dtype == np.int64
    assert not np.array_equal(a.sample(0), a.sample(1))
    assert not np.array_equal(a.sample(0), SyntheticTokens(512, 64, seed=8).sample(0))
    tokens = a.samples(0, 64)
    assert tokens.min() >= 0 and tokens.max() < 512


def test_synthetic_tokens_are_skewed_and_predictable() -> None:
    """Learnable: the unigram entropy is well below ln(vocab) and most bigrams are (nearly) deterministic."""
    tokens = SyntheticTokens(512, 128, seed=1).samples(0, 200).reshape(-1)
    p = np.bincount(tokens, minlength=512) / tokens.size
    entropy = -(p[p > 0] * np.log(p[p > 0])).sum()
    assert entropy < np.log(512) - 0.3
    pairs = tokens[:-1] * 512 + tokens[1:]
    top_share = np.mean([np.bincount(pairs[tokens[:-1] == t] % 512).max() / (tokens[:-1] == t).sum()
                         for t in np.unique(tokens[:-1])])
    assert top_share > 0.3  # a uniform random stream would give about 1/512 per successor


def test_layout_slices_the_global_batch_contiguously() -> None:
    source = SyntheticTokens(512, 16, seed=3)
    global_batch, mb, dp = 8, 2, 2
    step = 3
    global_tokens = source.samples(step * global_batch, global_batch)
    seen = []
    for rank in range(dp):
        layout = BatchLayout(global_batch, mb, dp, rank)
        assert layout.grad_accum == 2
        for m in range(layout.grad_accum):
            inputs, labels = micro_batch(source, layout, step, m)
            assert inputs.shape == labels.shape == (mb, 16)
            assert torch.equal(inputs[:, 1:], labels[:, :-1])
            seen.append(torch.cat([inputs, labels[:, -1:]], dim=1))
    assert torch.equal(torch.cat(seen), torch.from_numpy(global_tokens))


def test_every_layout_sees_the_same_global_batches() -> None:
    source = SyntheticTokens(512, 16, seed=3)

    def global_batches(mb: int, dp: int, steps: int) -> list[torch.Tensor]:
        its = [micro_batches(source, BatchLayout(8, mb, dp, r)) for r in range(dp)]
        per_step = 8 // (mb * dp)
        return [torch.cat([next(it)[0] for it in its for _ in range(per_step)]) for _ in range(steps)]

    ref = global_batches(8, 1, 3)
    for mb, dp in [(1, 1), (2, 2), (1, 4), (4, 2)]:
        # Rank-major, then micro-batch-major concatenation reproduces the global order.
        got = global_batches(mb, dp, 3)
        assert all(torch.equal(a, b) for a, b in zip(ref, got, strict=True)), (mb, dp)


def test_layout_rejects_batches_that_do_not_divide() -> None:
    with pytest.raises(ValueError, match="global batch 10 not divisible by micro batch x dp = 4x2 = 8"):
        BatchLayout(10, 4, 2, 0)
    with pytest.raises(ValueError):
        BatchLayout(8, 2, 2, 2)


def test_a_cells_layout_is_its_engines_and_follows_the_cells_batch_rule() -> None:
    """One batch rule for the plan, the engine and the data: the layout's micro-batches per step are the cell's."""
    from calorimeter.plan.cell import Cell

    cell = Cell(sweep="s", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=4, tp=2, global_batch=8,
                micro_batch=2)
    layout = BatchLayout.of(cell, cell.dp, 1)
    assert cell.batch_reason is None and layout.grad_accum == cell.grad_accum == 2
    with pytest.raises(ValueError, match="the engine has 4 data-parallel ranks, the cell 2"):
        BatchLayout.of(cell, 4, 0)
    odd = Cell(**{**vars(cell), "global_batch": 6})
    assert odd.batch_reason == "global batch 6 not divisible by micro batch x dp = 2x2 = 4"
    with pytest.raises(ValueError, match=odd.batch_reason):
        BatchLayout.of(odd, odd.dp, 0)


def test_token_file_round_trip_and_windows(tmp_path: Path) -> None:
    tokens = np.arange(1000)  # unique ids: a window is identified by its first token
    bin_path = write_token_file(tmp_path / "corpus" / "pile_00", tokens, vocab_size=1000)
    assert bin_path.stat().st_size == 2000  # uint16
    assert read_token_file_meta(tmp_path / "corpus" / "pile_00") == (np.dtype("uint16"), 1000)
    data = TokenFile(tmp_path / "corpus" / "pile_00", seq_len=32, seed=5, vocab_size=1000)
    assert data.num_windows == (1000 - 1) // 32
    first_epoch = data.samples(0, data.num_windows)
    starts = sorted(int(np.flatnonzero(tokens == row[0])[0]) for row in first_epoch)
    assert starts == [w * 32 for w in range(data.num_windows)]  # every window exactly once per epoch
    for row in first_epoch:
        start = int(np.flatnonzero(tokens == row[0])[0])
        assert np.array_equal(row, tokens[start : start + 33])
    again = TokenFile(tmp_path / "corpus" / "pile_00", seq_len=32, seed=5)
    assert np.array_equal(again.samples(40, 6), data.samples(40, 6))  # deterministic, epochs included
    source = make_source(str(tmp_path / "corpus" / "pile_00"), 1000, 32, 5)
    assert np.array_equal(source.samples(3, 2), data.samples(3, 2))


def test_token_file_uint32_and_megatron_idx(tmp_path: Path) -> None:
    tokens = (np.arange(600) * 7919) % 128256
    write_token_file(tmp_path / "big", tokens, vocab_size=128256)
    assert read_token_file_meta(tmp_path / "big")[0] == np.dtype("uint32")
    # A Megatron-style index: magic, version, dtype code (8 = uint16), then counts (not needed here).
    (tmp_path / "mega.bin").write_bytes(np.arange(300, dtype=np.uint16).tobytes())
    (tmp_path / "mega.idx").write_bytes(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8)
                                        + struct.pack("<Q", 1) + struct.pack("<Q", 2))
    mega = TokenFile(tmp_path / "mega", seq_len=16, seed=0)
    assert mega.tokens.dtype == np.uint16 and mega.sample(0).shape == (17,)


@pytest.mark.parametrize("case", ["no-bin", "no-meta", "bad-json", "bad-dtype", "bad-idx", "too-short", "vocab"])
def test_bad_datasets_raise_value_error_naming_the_path(tmp_path: Path, case: str) -> None:
    prefix = tmp_path / f"ds-{case}"
    if case != "no-bin":
        np.arange(100, dtype=np.uint16).tofile(str(prefix) + ".bin")
    if case in ("bad-json", "bad-dtype", "too-short", "vocab"):
        meta = {"bad-json": "{not json", "bad-dtype": json.dumps({"dtype": "float32"}),
                "too-short": json.dumps({"dtype": "uint16"}), "vocab": json.dumps({"dtype": "uint16"})}[case]
        Path(str(prefix) + ".json").write_text(meta)
    if case == "bad-idx":
        Path(str(prefix) + ".idx").write_bytes(b"NOTANIDX" * 4)
    seq_len = 200 if case == "too-short" else 16
    vocab = 50 if case == "vocab" else 512
    with pytest.raises(ValueError, match=f"ds-{case}"):
        TokenFile(prefix, seq_len=seq_len, seed=0, vocab_size=vocab).samples(0, 4)
