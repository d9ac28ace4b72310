"""Peer: Megatron-core's own GPT model, data-parallel wrapper, distributed optimizer and pipeline schedules, training
the cell's declared Llama model as a `command` cell (calorimeter is its launcher; docs/command.md).

    python bench/peers/megatron_gpt.py [--tp N [--sp]] [--pp N [--vpp V]] [--no-overlap]

What Megatron-LM's ``pretrain_gpt.py`` would run, built from the megatron-core wheel alone (Megatron-LM's training
scripts are not a wheel, and NeMo and Transformer Engine cannot be installed on an offline node: docs/command.md):

* ``GPTModel`` with Megatron-core's local layer spec (its own tensor-parallel linears, RoPE, SwiGLU, untied head), the
  attention core replaced by PyTorch's SDPA (flash/cuDNN kernels, causal, grouped-query; the local spec's
  ``DotProductAttention`` materialises the s x s scores) and RMSNorm by ``torch.nn.RMSNorm`` marked for sequence
  parallelism; bf16 parameters and gradients (Megatron-LM's default without ``--accumulate-allreduce-grads-in-fp32``),
  fp32 master weights;
* ``--tp N`` tensor parallelism, ``--sp`` with sequence parallelism; ``--pp N`` Megatron's 1F1B pipeline, ``--vpp
  V`` its interleaved 1F1B with V model chunks a rank; the rest of the ranks data parallelism with Megatron's
  ``DistributedDataParallel`` and distributed optimizer, gradient reduce-scatter and parameter all-gather overlapped
  with the backward and forward passes (``--no-overlap``: after them);
* the cell's sequence length, micro-batch and global batch (micro-batches a step: global batch / (micro-batch x dp)),
  random tokens, AdamW (torch's: no apex or Transformer Engine), CALORIMETER_STEPS steps, each written to
  CALORIMETER_STEP_LOG (timed between two device synchronisations, with the loss on the last stage and the rank's
  peak memory). On CPU ranks (a dry run; Megatron-core itself needs CUDA in places): gloo, fp32, Megatron's plain
  optimizer (its distributed one takes CUDA tensors only) without gradient clipping (CUDA tensors only), no overlap;
  tensor parallelism needs Megatron's CUDA RNG tracker, so it runs on GPUs only.

Not Megatron-LM or NeMo as published (no Transformer Engine: unfused norms and linears, no userbuffers TP overlap,
no fused RoPE or cross-entropy): a Megatron-core peer at the kernels this node has.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    ap.add_argument("--sp", action="store_true", help="sequence parallelism (tp > 1)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree")
    ap.add_argument("--vpp", type=int, default=1, help="model chunks a pipeline rank (interleaved 1F1B when > 1)")
    ap.add_argument("--no-overlap", action="store_true", help="reduce gradients / gather parameters after the passes")
    return ap.parse_args(argv)


def layout(args: argparse.Namespace, world: int, spec: dict, mbs: int, gbs: int) -> dict[str, int]:
    """Data-parallel degree and micro-batches a step of a layout.

    Raises:
        SystemExit: degrees that do not divide the ranks, heads, layers or batch, or Megatron's interleaving
            conditions.
    """
    if world % (args.tp * args.pp):
        raise SystemExit(f"tp {args.tp} x pp {args.pp} does not divide the {world} ranks")
    if spec["num_attention_heads"] % args.tp or spec["num_query_groups"] % args.tp:
        raise SystemExit(f"tp {args.tp} does not divide {spec['num_attention_heads']} heads and "
                         f"{spec['num_query_groups']} key/value heads")
    if args.sp and args.tp < 2:
        raise SystemExit("--sp needs --tp > 1")
    if spec["num_layers"] % (args.pp * args.vpp):
        raise SystemExit(f"{spec['num_layers']} layers do not split into pp {args.pp} x vpp {args.vpp} chunks")
    if args.vpp > 1 and args.pp < 2:
        raise SystemExit("--vpp needs --pp > 1")
    dp = world // (args.tp * args.pp)
    if gbs % (mbs * dp):
        raise SystemExit(f"global batch {gbs} is not a multiple of micro-batch {mbs} x {dp} data-parallel ranks")
    micro = gbs // (mbs * dp)
    if args.vpp > 1 and micro % args.pp:
        raise SystemExit(f"interleaved 1F1B needs micro-batches a step ({micro}) to be a multiple of pp {args.pp}")
    return {"dp": dp, "micro_batches": micro}


def transformer_config(spec: dict, args: argparse.Namespace, bf16: bool) -> Any:
    """Megatron-core's ``TransformerConfig`` of the declared Llama model (no fusion that needs apex or TE)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if bf16 else torch.float32
    return TransformerConfig(
        num_layers=spec["num_layers"], hidden_size=spec["hidden_size"], ffn_hidden_size=spec["ffn_hidden_size"],
        num_attention_heads=spec["num_attention_heads"], num_query_groups=spec["num_query_groups"],
        kv_channels=spec.get("head_dim") or spec["hidden_size"] // spec["num_attention_heads"],
        normalization="RMSNorm", layernorm_epsilon=1e-5, gated_linear_unit=True, activation_func=F.silu,
        add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0, init_method_std=spec.get("init_std", 0.02),
        tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp if args.vpp > 1 else None, sequence_parallel=args.sp,
        bf16=bf16, params_dtype=dtype, pipeline_dtype=dtype, autocast_dtype=dtype,
        bias_activation_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False, gradient_accumulation_fusion=False, deallocate_pipeline_outputs=True,
        use_cpu_initialization=not torch.cuda.is_available())


def layer_classes() -> tuple[type, type]:
    """(SDPA core attention, RMSNorm for sequence parallelism), as Megatron-core's spec builds them."""
    from megatron.core.transformer.module import MegatronModule

    class SDPAttention(MegatronModule):
        """Megatron's core-attention interface on ``scaled_dot_product_attention`` (causal, grouped-query)."""

        def __init__(self, config: Any, layer_number: int, attn_mask_type: Any, attention_type: str,
                     attention_dropout: float | None = None, softmax_scale: float | None = None,
                     **_: Any) -> None:
            super().__init__(config=config)
            self.softmax_scale = softmax_scale

        def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                    attn_mask_type: Any = None, attention_bias: Any = None,
                    packed_seq_params: Any = None) -> torch.Tensor:
            if packed_seq_params is not None or attention_bias is not None:
                raise ValueError("SDPAttention: no packed sequences or attention bias")
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [s, b, h, d] -> [b, h, s, d]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale,
                                                 enable_gqa=k.shape[1] != q.shape[1])
            s, b = out.shape[2], out.shape[0]
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)  # [s, b, h * d]

    class RMSNorm(torch.nn.RMSNorm):
        """``torch.nn.RMSNorm`` whose weight Megatron all-reduces over tp under sequence parallelism."""

        def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> None:
            super().__init__(hidden_size, eps=eps, dtype=config.params_dtype)
            self.weight.sequence_parallel = config.sequence_parallel

    return SDPAttention, RMSNorm


def build_chunks(config: Any, spec: dict, seq: int, device: torch.device) -> list[Any]:
    """This rank's model chunks (one, or ``vpp`` for interleaved 1F1B)."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    attention, norm = layer_classes()
    layer = get_gpt_layer_local_spec(normalization="RMSNorm")
    layer.submodules.self_attention.submodules.core_attention = attention
    layer.submodules.input_layernorm = norm
    layer.submodules.pre_mlp_layernorm = norm
    chunks = []
    for vp in range(config.virtual_pipeline_model_parallel_size or 1):
        vp_stage = vp if config.virtual_pipeline_model_parallel_size else None
        n = get_num_layers_to_build(config, vp_stage=vp_stage)
        block = TransformerBlockSubmodules(layer_specs=[layer] * n, layer_norm=norm)
        model = GPTModel(config, block, vocab_size=spec["vocab_size"], max_sequence_length=seq,
                         pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                         post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
                         share_embeddings_and_output_weights=False, position_embedding_type="rope",
                         rotary_base=int(spec["rotary_base"]), vp_stage=vp_stage)
        chunks.append(model.to(device))
    return chunks


def main() -> None:
    args = parse()
    spec = json.loads(os.environ["CALORIMETER_MODEL_SPEC"])
    if spec["family"] != "llama" or spec.get("tie_embeddings") or spec.get("qkv_bias"):
        raise SystemExit(f"this peer builds untied Llama models without biases, not {spec['name']}")
    seq, mbs = int(os.environ["CALORIMETER_SEQ_LEN"]), int(os.environ["CALORIMETER_MICRO_BATCH"])
    gbs, steps = int(os.environ["CALORIMETER_GLOBAL_BATCH"]), int(os.environ["CALORIMETER_STEPS"])
    lay = layout(args, int(os.environ.get("WORLD_SIZE", 1)), spec, mbs, gbs)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                                 virtual_pipeline_model_parallel_size=args.vpp if args.vpp > 1 else None)
    torch.manual_seed(1234)
    if cuda:
        model_parallel_cuda_manual_seed(1234)
    config = transformer_config(spec, args, bf16=cuda and os.environ.get("CALORIMETER_PRECISION") == "bf16")
    overlap = not args.no_overlap
    # Megatron's distributed optimizer takes CUDA tensors only: CPU ranks (a dry run) use its plain one
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=not cuda, overlap_grad_reduce=overlap,
                                               overlap_param_gather=overlap and cuda, use_distributed_optimizer=cuda)
    chunks = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=m, disable_bucketing=i > 0)
              for i, m in enumerate(build_chunks(config, spec, seq, device))]
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-4, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
                        clip_grad=1.0 if cuda else 0.0, bf16=config.bf16, params_dtype=config.params_dtype,
                        use_distributed_optimizer=cuda), chunks)
    # what Megatron-LM's training loop wires: gradient sync deferred to the last micro-batch, then finished (and
    # the parameters' all-gather started) by finalize_model_grads
    config.no_sync_func = [c.no_sync for c in chunks] if len(chunks) > 1 else chunks[0].no_sync
    config.finalize_model_grads_func = finalize_model_grads
    if overlap and cuda:
        config.grad_sync_func = [c.start_grad_sync for c in chunks] if len(chunks) > 1 else chunks[0].start_grad_sync
        config.param_sync_func = ([c.start_param_sync for c in chunks] if len(chunks) > 1
                                  else chunks[0].start_param_sync)

    gen = torch.Generator(device=device).manual_seed(1234 + ps.get_data_parallel_rank())
    positions = torch.arange(seq, device=device).unsqueeze(0).expand(mbs, -1)

    def batches() -> Any:
        while True:
            yield torch.randint(0, spec["vocab_size"], (mbs, seq), device=device, generator=gen)

    def forward_step(data_iterator: Any, model: Any) -> tuple[torch.Tensor, Any]:
        tokens = next(data_iterator)
        out = model(tokens, positions, None, labels=tokens)  # per-token losses on the last stage

        def loss_func(per_token: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss = per_token.float().mean()
            return loss, {"lm loss": loss.detach().clone()}  # the schedule divides loss in place

        return out, loss_func

    data = [batches() for _ in chunks] if len(chunks) > 1 else batches()
    forward_backward = get_forward_backward_func()
    log = open(os.environ["CALORIMETER_STEP_LOG"], "a")  # noqa: SIM115 - one line per step until the end
    for step in range(steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.time()
        for c in chunks:
            c.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=data,
                                  model=chunks if len(chunks) > 1 else chunks[0],
                                  num_microbatches=lay["micro_batches"], seq_length=seq, micro_batch_size=mbs,
                                  forward_only=False)
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        rec: dict[str, Any] = {"step": step, "t_begin_s": t0, "t_end_s": time.time(), "tokens": gbs * seq}
        if losses:  # the last pipeline stage: its micro-batches' losses (its data-parallel rank's)
            rec["loss"] = float(torch.stack([x["lm loss"] for x in losses]).mean())
        if cuda:
            rec["max_memory_bytes"] = torch.cuda.max_memory_allocated()
        log.write(json.dumps(rec) + "\n")
        log.flush()
        if dist.get_rank() == 0:
            print(f"step {step} {rec['t_end_s'] - t0:.3f} s", flush=True)
    log.close()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
