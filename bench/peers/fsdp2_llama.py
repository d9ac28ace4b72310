"""Peer: plain PyTorch FSDP2 on Hugging Face transformers' Llama, optionally torch.compile per layer, as a `command`
cell (calorimeter is its launcher; docs/command.md).

The model is the cell's declared model (CALORIMETER_MODEL_SPEC: hidden, ffn, layers, heads, groups, vocab, RoPE
base; untied head, random init), trained on random tokens at the cell's sequence length, micro-batch and global
batch (CALORIMETER_MICRO_BATCH, CALORIMETER_GLOBAL_BATCH: one optimizer step per global batch, with gradient
accumulation) for CALORIMETER_STEPS steps; each step is appended to CALORIMETER_STEP_LOG after
torch.cuda.synchronize(). On GPUs: NCCL, bf16 parameters with fp32 gradient reduction (MixedPrecisionPolicy), SDPA
attention, fused AdamW; on CPU (a dry run): gloo, fp32.

    --compile   torch.compile every decoder layer before sharding it (what torchtitan does per block)
    --ckpt      activation checkpointing (transformers' gradient checkpointing)

Successor of bench/fsdp2_llama_baseline.py (the script of the README's FSDP2 numbers), which prints instead of
logging steps.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", action="store_true", help="torch.compile every decoder layer")
    ap.add_argument("--ckpt", action="store_true", help="activation checkpointing")
    args = ap.parse_args()
    spec = json.loads(os.environ["CALORIMETER_MODEL_SPEC"])
    if spec["family"] != "llama" or spec.get("tie_embeddings") or spec.get("qkv_bias"):
        raise SystemExit(f"this peer builds untied Llama models without biases, not {spec['name']}")
    seq, mbs = int(os.environ["CALORIMETER_SEQ_LEN"]), int(os.environ["CALORIMETER_MICRO_BATCH"])
    gbs, steps = int(os.environ["CALORIMETER_GLOBAL_BATCH"]), int(os.environ["CALORIMETER_STEPS"])
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()
    if gbs % (mbs * world):
        raise SystemExit(f"global batch {gbs} is not a multiple of micro-batch {mbs} x {world} ranks")
    accum = gbs // (mbs * world)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    cfg = LlamaConfig(hidden_size=spec["hidden_size"], intermediate_size=spec["ffn_hidden_size"],
                      num_hidden_layers=spec["num_layers"], num_attention_heads=spec["num_attention_heads"],
                      num_key_value_heads=spec["num_query_groups"], head_dim=spec["head_dim"],
                      vocab_size=spec["vocab_size"], max_position_embeddings=max(seq, spec["seq_length"]),
                      rope_theta=spec["rotary_base"], attn_implementation="sdpa", tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    if args.ckpt:
        model.gradient_checkpointing_enable()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if cuda else torch.float32, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        if args.compile:
            layer.compile()
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, spec.get("init_std", 0.02))
        rope = model.model.rotary_emb  # its buffers were on meta: recompute them after to_empty
        inv = 1.0 / (spec["rotary_base"] ** (torch.arange(0, spec["head_dim"], 2, device=device).float()
                                             / spec["head_dim"]))
        rope.inv_freq.copy_(inv)
        if hasattr(rope, "original_inv_freq"):
            rope.original_inv_freq = inv
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    gen = torch.Generator(device=device).manual_seed(1234 + dist.get_rank())
    log = open(os.environ["CALORIMETER_STEP_LOG"], "a")  # noqa: SIM115 - one line per step until the end
    for step in range(steps):
        xs = [torch.randint(0, cfg.vocab_size, (mbs, seq), device=device, generator=gen) for _ in range(accum)]
        if cuda:
            torch.cuda.synchronize()
        t0 = time.time()
        for x in xs:
            loss = model(input_ids=x, labels=x).loss
            (loss / accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        rec = {"step": step, "t_begin_s": t0, "t_end_s": time.time(), "tokens": gbs * seq, "loss": loss.item()}
        if cuda:
            rec["max_memory_bytes"] = torch.cuda.max_memory_allocated()
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if dist.get_rank() == 0:
            print(f"step {step} {rec['t_end_s'] - t0:.3f} s loss {rec['loss']:.3f}", flush=True)
    log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
