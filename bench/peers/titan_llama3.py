"""Peer: torchtitan 0.2.2 training the cell's declared Llama model, as a `command` cell (docs/command.md).

Run on every rank, as torchrun would start torchtitan (calorimeter is the launcher)::

    python bench/peers/titan_llama3.py [--tp N [--async-tp]] [--pp N [--pp-schedule NAME]] [--step-log]
                                       [torchtitan's own flags, e.g. --parallelism.fsdp_reshard_after_forward never]

torchtitan 0.2.2 is the newest release that imports on torch 2.11 (0.3.0 needs ``DataParallelMeshDims``, which
torch 2.11 lacks). This script registers the cell's model as a llama3 flavour ``calorimeter`` (torchtitan's
``TransformerModelArgs``: the shape from CALORIMETER_MODEL_SPEC: layers, width, heads, groups, ffn, vocab, RoPE base;
an untied head, as in Llama-3 8B), writes a job config (TOML) from torchtitan's ``llama3_8b.toml`` preset with only
what the cell fixes changed, and runs torchtitan's own trainer (``torchtitan.train.main``):

* fp32 master parameters with bf16 compute (``mixed_precision_param``): FSDP2 over the data-parallel ranks with fp32
  reductions when there are several; on one GPU torchtitan shards nothing and autocasts to bf16 (its
  ``maybe_enable_amp``); AdamW; SDPA causal attention (``TITAN_ATTN=flex`` picks flex attention with block-causal
  masks instead);
* ``--tp N``: torchtitan's tensor parallelism (sequence-parallel norms, loss parallel) over N ranks; ``--async-tp``
  its asynchronous TP (symmetric-memory all-gather/reduce-scatter fused with the GEMMs by inductor: needs
  ``TITAN_COMPILE=1``); ``--pp N``: its pipeline over N ranks with ``--pp-schedule`` (torch's names: ``1F1B``,
  ``Interleaved1F1B``, ``ZBVZeroBubble``, ``GPipe``, ...; looped schedules hold 2 stages a rank); the rest of the
  ranks are FSDP2 data parallelism;
* sequence length, micro-batch and global batch: without a pipeline the micro-batch is torchtitan's local batch and
  the rest of the global batch is gradient accumulation; with one, the local batch is the global batch over the
  data-parallel ranks, cut into pipeline micro-batches of the cell's micro-batch; CALORIMETER_STEPS steps;
* no activation checkpointing (the engine's cell recomputes nothing); ``TITAN_COMPILE=1`` compiles the model and the
  loss (``[compile] enable``);
* no profiler, checkpoint, validation or TensorBoard; a log line every step. ``--step-log``: every step is also
  written to CALORIMETER_STEP_LOG (the step-log protocol, ``log_format: jsonl``), timed between two device
  synchronisations on every rank, with the loss and the rank's peak device memory; without it the cell reads
  torchtitan's console lines (``log_format: torchtitan``).

Nothing can be fetched on the compute node, so the text and tokenizer are made locally, once per rank, in
``$TMPDIR/calorimeter-titan-<rank>``: a byte-level BPE tokenizer (vocabulary at most the model's, trained with
`tokenizers` on the same text: the same on every rank) and a JSON-lines dataset of random words read by
torchtitan's ``c4_test`` loader (``load_dataset(path, split="train")`` on a local folder). Token ids do not change
the work of a step at a fixed sequence length, so throughput is that of real text. The dataset holds
:data:`DOCUMENTS` documents: torchtitan gives each data-parallel rank a contiguous slice of the documents
(``datasets.distributed.split_dataset_by_node``), and a rank whose slice is empty never yields a batch (older
``datasets``: an endless re-loop) or fails in ``Dataset.shard`` (newer: ``IndexError``) while its peers wait in
their first collective: with one document, every rank but the first did, which is why this peer never reached its
first step at 4 ranks.

A rank that hangs fails fast with its reason in its console log: Python's ``faulthandler`` dumps every thread's
stack and ends the rank when the start-up and first step take longer than ``TITAN_STALL_S`` (default 300) seconds
or a later step longer than ``TITAN_STEP_STALL_S`` (default 120); torchtitan's NCCL flight recorder dumps its
collectives on a communication timeout (``comm.init_timeout_seconds``, set past the first-step limit) into
``titan/`` beside the step logs.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: words of the text (about 2 tokens a word: 100 windows of 8192 tokens before the loader loops)
WORDS = 400_000
#: documents the text is cut into: at least the data-parallel degree (each rank must get one), each longer than a
#: window of 8192 tokens (6,250 words), so that a window spans at most two documents
DOCUMENTS = 64
#: the flavour this script registers in torchtitan's llama3 model registry
FLAVOR = "calorimeter"
#: default seconds of start-up plus first step (compilation included), and of any later step, before a rank's
#: stacks are dumped and it ends
STALL_S, STEP_STALL_S = 300.0, 120.0


def _assets(vocab_size: int) -> tuple[Path, Path]:
    """(tokenizer folder, dataset folder), made once per rank (deterministic: every rank makes the same)."""
    root = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / f"calorimeter-titan-{os.environ.get('RANK', 0)}"
    tok_dir, data_dir = root / "tokenizer", root / f"data-{DOCUMENTS}"
    if (tok_dir / "tokenizer.json").is_file() and (data_dir / "train.jsonl").is_file():
        return tok_dir, data_dir
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lexicon = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    words = [rng.choice(lexicon) for _ in range(WORDS)]
    data_dir.mkdir(parents=True, exist_ok=True)
    per = WORDS // DOCUMENTS
    (data_dir / "train.jsonl").write_text("".join(json.dumps({"text": " ".join(words[i * per:(i + 1) * per])}) + "\n"
                                                  for i in range(DOCUMENTS)))
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


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's options, and the rest (torchtitan's own flags, passed on)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    ap.add_argument("--async-tp", action="store_true", help="torchtitan's async TP (needs TITAN_COMPILE=1)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    ap.add_argument("--pp-schedule", default="1F1B", help="torch's pipeline schedule name")
    ap.add_argument("--step-log", action="store_true", help="write CALORIMETER_STEP_LOG (log_format: jsonl)")
    return ap.parse_known_args(argv)


def layout(args: argparse.Namespace, world: int, mbs: int, gbs: int, spec: dict) -> dict[str, int]:
    """Data-parallel degree and torchtitan's local batch of a layout.

    Raises:
        SystemExit: degrees that do not divide the ranks, the heads or the batch, async TP without TP or
            compilation, more data-parallel ranks than documents.
    """
    if world % (args.tp * args.pp):
        raise SystemExit(f"tp {args.tp} x pp {args.pp} does not divide the {world} ranks")
    if spec["num_attention_heads"] % args.tp or spec["num_query_groups"] % args.tp:
        raise SystemExit(f"tp {args.tp} does not divide {spec['num_attention_heads']} heads and "
                         f"{spec['num_query_groups']} key/value heads")
    dp = world // (args.tp * args.pp)
    if args.async_tp and (args.tp < 2 or os.environ.get("TITAN_COMPILE", "0") != "1"):
        raise SystemExit("--async-tp needs --tp > 1 and TITAN_COMPILE=1 (torchtitan's async TP is an inductor pass)")
    if gbs % (mbs * dp):
        raise SystemExit(f"global batch {gbs} is not a multiple of micro-batch {mbs} x {dp} data-parallel ranks")
    if dp > DOCUMENTS:
        raise SystemExit(f"{dp} data-parallel ranks but {DOCUMENTS} documents: a rank without one never yields")
    # with a pipeline, torchtitan cuts the local batch into micro-batches of pipeline_parallel_microbatch_size
    return {"dp": dp, "local_batch": gbs // dp if args.pp > 1 else mbs}


def job_toml(tok_dir: Path, data_dir: Path, dump: Path, seq: int, mbs: int, gbs: int, steps: int, compile_: bool,
             args: argparse.Namespace, local_batch: int, comm_timeout_s: int) -> str:
    """torchtitan's llama3_8b.toml preset with the cell's flavour, layout, batch and steps (module docstring)."""
    return f"""
[job]
dump_folder = {json.dumps(str(dump))}
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
local_batch_size = {local_batch}
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
tensor_parallel_degree = {args.tp}
enable_async_tensor_parallel = {str(args.async_tp).lower()}
pipeline_parallel_degree = {args.pp}
pipeline_parallel_schedule = "{args.pp_schedule}"
pipeline_parallel_microbatch_size = {mbs}
context_parallel_degree = 1
[comm]
init_timeout_seconds = {comm_timeout_s}
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


def prepare(args: argparse.Namespace) -> Path:
    """Make the assets and write the job config (imports nothing of torchtitan); the path of the config."""
    spec = json.loads(os.environ["CALORIMETER_MODEL_SPEC"])
    seq, mbs = int(os.environ["CALORIMETER_SEQ_LEN"]), int(os.environ["CALORIMETER_MICRO_BATCH"])
    gbs, steps = int(os.environ["CALORIMETER_GLOBAL_BATCH"]), int(os.environ["CALORIMETER_STEPS"])
    lay = layout(args, int(os.environ.get("WORLD_SIZE", 1)), mbs, gbs, spec)
    tok_dir, data_dir = _assets(spec["vocab_size"])
    step_log = os.environ.get("CALORIMETER_STEP_LOG")
    # the flight recorder's dumps beside the step logs (in the cell's record), else beside the assets
    dump = Path(step_log).parent / "titan" if step_log else tok_dir.parent / "outputs"
    path = tok_dir.parent / "job.toml"
    comm_timeout_s = int(float(os.environ.get("TITAN_STALL_S", STALL_S))) + 60
    path.write_text(job_toml(tok_dir, data_dir, dump, seq, mbs, gbs, steps, os.environ.get("TITAN_COMPILE", "0") == "1",
                             args, lay["local_batch"], comm_timeout_s))
    return path


def register() -> None:
    """Register the declared model as torchtitan's llama3 flavour ``calorimeter``."""
    from torchtitan.models.llama3 import llama3_args

    llama3_args[FLAVOR] = model_args(json.loads(os.environ["CALORIMETER_MODEL_SPEC"]),
                                     os.environ.get("TITAN_ATTN", "sdpa"))


def trainer_class(step_log: bool) -> type:
    """torchtitan's ``Trainer`` with a stall guard re-armed after every step and, with ``step_log``, each step
    written to CALORIMETER_STEP_LOG."""
    import torch
    from torchtitan.train import Trainer

    from calorimeter.command.steplog import StepLogWriter

    step_stall_s = float(os.environ.get("TITAN_STEP_STALL_S", STEP_STALL_S))
    tokens = int(os.environ["CALORIMETER_GLOBAL_BATCH"]) * int(os.environ["CALORIMETER_SEQ_LEN"])
    log = StepLogWriter() if step_log else None  # (StepLogWriter(None) would take CALORIMETER_STEP_LOG too)

    class CellTrainer(Trainer):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.cell_loss: float | None = None
            logged = self.metrics_processor.log

            def keep_loss(step: int, avg_loss: Any, *rest: Any, **kw2: Any) -> Any:
                self.cell_loss = float(avg_loss)
                return logged(step, avg_loss, *rest, **kw2)

            self.metrics_processor.log = keep_loss

        def train_step(self, data_iterator: Any) -> None:
            cuda = self.device.type == "cuda"
            if cuda:
                torch.cuda.synchronize(self.device)
            t0 = time.time()
            super().train_step(data_iterator)
            if cuda:
                torch.cuda.synchronize(self.device)
            t1 = time.time()
            faulthandler.dump_traceback_later(step_stall_s, exit=True)  # re-armed: the next step's limit
            extra: dict[str, Any] = {"tokens": tokens}
            if self.cell_loss is not None and self.cell_loss >= 0:  # -1: a pipeline stage without the loss
                extra["loss"] = self.cell_loss
            if cuda:
                extra["max_memory_bytes"] = torch.cuda.max_memory_allocated(self.device)
            if log is not None:
                log.step(self.step, t0, t1, **extra)

    return CellTrainer


def main() -> None:
    args, rest = parse(sys.argv[1:])
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # a compute node reaches nothing
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    faulthandler.enable()  # a crash in native code prints the stacks too
    faulthandler.dump_traceback_later(float(os.environ.get("TITAN_STALL_S", STALL_S)), exit=True)
    # before any torchtitan import: ConfigManager.parse_args binds sys.argv[1:] as its default when imported
    sys.argv[1:] = ["--job.config_file", str(prepare(args)), *rest]
    register()
    from torchtitan.train import main as titan_main

    titan_main(trainer_class(args.step_log))
    faulthandler.cancel_dump_traceback_later()
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
