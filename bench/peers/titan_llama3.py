"""Peer: torchtitan 0.2.2 training the cell's declared Llama model, as a `command` cell (docs/command.md).

Run on every rank, as torchrun would start torchtitan (calorimeter is the launcher)::

    python bench/peers/titan_llama3.py

torchtitan 0.2.2 is the newest release that imports on torch 2.11 (0.3.0 needs ``DataParallelMeshDims``, which
torch 2.11 lacks). This script registers the cell's model as a llama3 flavour ``calorimeter`` (torchtitan's
``TransformerModelArgs``: the shape from CALORIMETER_MODEL_SPEC: layers, width, heads, groups, ffn, vocab, RoPE base;
an untied head, as in Llama-3 8B), writes a job config (TOML) from torchtitan's ``llama3_8b.toml`` preset with only
what the cell fixes changed, and runs torchtitan's own ``torchtitan.train.main``:

* fp32 master parameters with bf16 compute (``mixed_precision_param``): FSDP2 over the ranks with fp32 reductions
  when there are several; on one GPU torchtitan shards nothing and autocasts to bf16 (its ``maybe_enable_amp``);
  AdamW; SDPA causal attention (``TITAN_ATTN=flex`` picks flex attention with block-causal masks instead);
* sequence length, micro-batch (local batch) and global batch, CALORIMETER_STEPS steps;
* no activation checkpointing (the engine's cell recomputes nothing); ``TITAN_COMPILE=1`` compiles the model and the
  loss (``[compile] enable``);
* no profiler, checkpoint, validation or TensorBoard; a log line every step (read with ``log_format: torchtitan``).

Nothing can be fetched on the compute node, so the text and tokenizer are made locally, once per rank, in
``$TMPDIR/calorimeter-titan-<rank>``: a byte-level BPE tokenizer (vocabulary at most the model's, trained with
`tokenizers` on the same text) and a JSON-lines dataset of random words read by torchtitan's ``c4_test`` loader
(``load_dataset(path, split="train")`` on a local folder; one document longer than every window). Token ids do not
change the work of a step at a fixed sequence length, so throughput is that of real text.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

#: words of the one document (about 2 tokens a word: 100 windows of 8192 tokens before the loader loops). One long
#: document, so that every window is one causal block (block-causal masks of flex attention equal causal ones)
WORDS = 400_000
#: the flavour this script registers in torchtitan's llama3 model registry
FLAVOR = "calorimeter"


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


def model_args(spec: dict, attn: str):  # -> torchtitan.models.llama3.TransformerModelArgs
    """torchtitan's llama3 model arguments of the declared model (its FFN width exactly the declared one)."""
    from torchtitan.models.llama3 import TransformerModelArgs

    if spec["family"] != "llama" or spec.get("tie_embeddings") or spec.get("qkv_bias"):
        raise SystemExit(f"this peer builds untied Llama models without biases, not {spec['name']}")
    dim, heads, ffn = spec["hidden_size"], spec["num_attention_heads"], spec["ffn_hidden_size"]
    if dim // heads != spec.get("head_dim", dim // heads):
        raise SystemExit(f"torchtitan's llama3 has head_dim = hidden/heads, not {spec['head_dim']}")
    # FeedForward(hidden_dim=4*dim): int(2*4*dim/3) rounded up to multiple_of: = ffn when int(8*dim/3) <= ffn
    if int(2 * 4 * dim / 3) > ffn:
        raise SystemExit(f"ffn_hidden_size {ffn} < 8/3 hidden: torchtitan's llama3 cannot build it")
    extra = {"attn_type": "flex", "attn_mask_type": "block_causal"} if attn == "flex" else {}
    return TransformerModelArgs(dim=dim, n_layers=spec["num_layers"], n_heads=heads,
                                n_kv_heads=spec["num_query_groups"], vocab_size=spec["vocab_size"],
                                multiple_of=ffn, ffn_dim_multiplier=None, rope_theta=spec["rotary_base"], **extra)


def job_toml(tok_dir: Path, data_dir: Path, seq: int, mbs: int, gbs: int, steps: int, compile_: bool) -> str:
    """torchtitan's llama3_8b.toml preset with the cell's flavour, batch and steps (module docstring)."""
    out = tok_dir.parent / "outputs"  # not the working directory (the repository)
    return f"""
[job]
dump_folder = {json.dumps(str(out))}
description = "calorimeter peer cell"
[profiling]
enable_profiling = false
[metrics]
log_freq = 1
enable_tensorboard = false
[model]
name = "llama3"
flavor = "{FLAVOR}"
hf_assets_path = {json.dumps(str(tok_dir))}
[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8
[lr_scheduler]
warmup_steps = 1
[training]
local_batch_size = {mbs}
global_batch_size = {gbs}
seq_len = {seq}
max_norm = 1.0
steps = {steps}
dataset = "c4_test"
dataset_path = {json.dumps(str(data_dir))}
dtype = "float32"
mixed_precision_param = "bfloat16"
mixed_precision_reduce = "float32"
[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1
[checkpoint]
enable = false
[compile]
enable = {str(compile_).lower()}
components = ["model", "loss"]
[activation_checkpoint]
mode = "none"
[validation]
enable = false
"""


def prepare() -> Path:
    """Make the assets and write the job config (imports nothing of torchtitan); the path of the config."""
    spec = json.loads(os.environ["CALORIMETER_MODEL_SPEC"])
    seq, mbs = int(os.environ["CALORIMETER_SEQ_LEN"]), int(os.environ["CALORIMETER_MICRO_BATCH"])
    gbs, steps = int(os.environ["CALORIMETER_GLOBAL_BATCH"]), int(os.environ["CALORIMETER_STEPS"])
    tok_dir, data_dir = _assets(spec["vocab_size"])
    path = tok_dir.parent / "job.toml"
    path.write_text(job_toml(tok_dir, data_dir, seq, mbs, gbs, steps, os.environ.get("TITAN_COMPILE", "0") == "1"))
    return path


def register() -> None:
    """Register the declared model as torchtitan's llama3 flavour ``calorimeter``."""
    from torchtitan.models.llama3 import llama3_args

    llama3_args[FLAVOR] = model_args(json.loads(os.environ["CALORIMETER_MODEL_SPEC"]),
                                     os.environ.get("TITAN_ATTN", "sdpa"))


if __name__ == "__main__":
    # before any torchtitan import: ConfigManager.parse_args binds sys.argv[1:] as its default when imported
    sys.argv[1:] = ["--job.config_file", str(prepare()), *sys.argv[1:]]
    register()
    from torchtitan.train import Trainer, main

    main(Trainer)
