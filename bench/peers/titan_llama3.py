"""Peer: torchtitan (0.3) training the cell's declared Llama model, as a `command` cell (docs/command.md).

A torchtitan config registry: run on every rank, as torchrun would start torchtitan (calorimeter is the launcher),
with this folder on PYTHONPATH:

    python -m torchtitan.train --module titan_llama3 --config calorimeter_llama3

It starts from torchtitan's own ``llama3_8b`` trainer config (FSDP2, bf16 parameters with fp32 reductions, fused
AdamW, its chunked cross-entropy, flex attention) and changes only what the cell fixes: the model's shape from
CALORIMETER_MODEL_SPEC (layers, width, heads, groups, ffn, vocab, RoPE base; an untied head, as in Llama-3 8B), the
sequence length, micro-batch (local batch) and global batch, the number of steps (CALORIMETER_STEPS), no activation
checkpointing (the engine's cell recomputes nothing), no profiler, checkpoint, validation or TensorBoard, a log line
every step (read with `log_format: torchtitan`). ``TITAN_COMPILE=1`` compiles the model and loss (torchtitan's
`--compile.enable`); ``TITAN_ATTN`` picks torchtitan's attention backend (default ``flex``).

Nothing can be fetched on the compute node, so the text and tokenizer are made locally, once per rank, in
``$TMPDIR/calorimeter-titan-<rank>``: a byte-level BPE tokenizer (vocabulary at most the model's, trained with
`tokenizers` on the same text) and a JSON-lines "c4_test"-style dataset of random words (one document longer than
every window). Token ids do not change the work of a step at a fixed sequence length, so throughput is that of real
text. Uses torchtitan internals (``torchtitan.models.llama3._build_llama3_layers``) that may move in later releases.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

from torchtitan.components.metrics import MetricsProcessor
from torchtitan.config import CompileConfig, TrainingConfig
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers, model_registry
from torchtitan.models.llama3.config_registry import llama3_8b
from torchtitan.tools.profiler import Profiler
from torchtitan.trainer import Trainer

#: words of the one document (about 2 tokens a word: 100 windows of 8192 tokens before the loader loops). One long
#: document, so that every window is one causal block: torchtitan's block-causal masks would otherwise skip the
#: attention across document boundaries, less work than the engine's causal attention over the whole sequence
WORDS = 400_000


def _assets(vocab_size: int) -> tuple[Path, Path]:
    """(tokenizer folder, dataset folder), made once per rank."""
    root = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / f"calorimeter-titan-{os.environ.get('RANK', 0)}"
    tok_dir, data_dir = root / "tokenizer", root / "data"
    if (tok_dir / "tokenizer.json").is_file() and (data_dir / "train.jsonl").is_file():
        return tok_dir, data_dir
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lexicon = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    words = [rng.choice(lexicon) for _ in range(WORDS)]
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "train.jsonl").write_text(json.dumps({"text": " ".join(words)}) + "\n")
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, 8000), special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((" ".join(words[i:i + 500]) for i in range(0, 100_000, 500)), trainer)
    tok_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True, "add_eos_token": False}))
    return tok_dir, data_dir


def _model(spec: dict, seq_len: int, attn: str) -> Llama3Model.Config:
    dim, vocab = spec["hidden_size"], spec["vocab_size"]
    s = dim ** -0.5
    import functools

    import torch.nn as nn

    return Llama3Model.Config(
        dim=dim, vocab_size=vocab,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init={"weight": functools.partial(nn.init.normal_, std=1.0)}),
        norm=RMSNorm.Config(normalized_shape=dim, param_init={"weight": nn.init.ones_}),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init={
            "weight": functools.partial(nn.init.trunc_normal_, std=s, a=-3 * s, b=3 * s), "bias": nn.init.zeros_}),
        layers=_build_llama3_layers(
            fuse_qkv=True, n_layers=spec["num_layers"], dim=dim, n_heads=spec["num_attention_heads"],
            n_kv_heads=spec["num_query_groups"], hidden_dim=spec["ffn_hidden_size"],
            rope=ComplexRoPE.Config(dim=spec["head_dim"], max_seq_len=max(seq_len, 8192), theta=spec["rotary_base"],
                                    scaling="llama"),
            attn_backend=attn))


def calorimeter_llama3() -> Trainer.Config:
    """torchtitan's llama3_8b trainer config with the cell's model, batch and steps (module docstring)."""
    spec = json.loads(os.environ["CALORIMETER_MODEL_SPEC"])
    if spec["family"] != "llama" or spec.get("tie_embeddings") or spec.get("qkv_bias"):
        raise SystemExit(f"this peer builds untied Llama models without biases, not {spec['name']}")
    seq, mbs = int(os.environ["CALORIMETER_SEQ_LEN"]), int(os.environ["CALORIMETER_MICRO_BATCH"])
    gbs, steps = int(os.environ["CALORIMETER_GLOBAL_BATCH"]), int(os.environ["CALORIMETER_STEPS"])
    attn = os.environ.get("TITAN_ATTN", "flex")
    tok_dir, data_dir = _assets(spec["vocab_size"])
    c = llama3_8b()
    base = model_registry("8B", attn_backend=attn)
    base.model = _model(spec, seq, attn)
    c.model_spec = base
    c.loss.loss_fn.global_vocab_size = spec["vocab_size"]
    c.hf_assets_path = str(tok_dir)
    c.dataloader = HuggingFaceTextDataLoader.Config(dataset="c4_test", dataset_path=str(data_dir))
    c.training = TrainingConfig(local_batch_size=mbs, global_batch_size=gbs, seq_len=seq, steps=steps,
                                dtype="float32", mixed_precision_param="bfloat16")
    c.metrics = MetricsProcessor.Config(log_freq=1, enable_tensorboard=False)
    c.profiler = Profiler.Config(enable_profiling=False)
    c.checkpoint.enable = False
    c.validator.enable = False
    c.activation_checkpoint = None
    c.compile = CompileConfig(enable=os.environ.get("TITAN_COMPILE", "0") == "1")
    c.dump_folder = str(tok_dir.parent / "outputs")  # not the working directory (the repository)
    return c
