# Kept in the repository so that it travels to GPU nodes with the checkout.
# Peer baseline: plain PyTorch FSDP2 + Hugging Face transformers Llama-3-8B (random init), bf16, SDPA, all local GPUs.
# What a user could run instead of a dedicated engine; compare side by side on the same node.
# usage: torchrun --nproc_per_node N fsdp2_llama_baseline.py SEQ MBS STEPS [ckpt] [accum=K]
# accum=K: one optimizer step per K micro-batches (global batch MBS x K x N; FSDP2's default gradient reduce-scatter
# after every micro-batch), so that a step compares with an engine cell of the same global batch.
# Measured 2026-11-20 on 8x H200: SEQ 8192 MBS 1 -> 0.972 s/step, 8424 tokens/s/GPU, 488 TFLOP/s/GPU, 49.3% MFU
# (dense bf16 peak 989), 76.6 GiB peak; SEQ 4096 MBS 2 -> 46.7% MFU. Needs torch>=2.6 and transformers 5.x.
import os, sys, time, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
from transformers import LlamaConfig, LlamaForCausalLM
seq, mbs, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); ckpt = "ckpt" in sys.argv[4:]
accum = int(next((a.split("=", 1)[1] for a in sys.argv[4:] if a.startswith("accum=")), 1))
dist.init_process_group("nccl"); rank = dist.get_rank(); world = dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                  attn_implementation="sdpa", tie_word_embeddings=False)
with torch.device("meta"):
    model = LlamaForCausalLM(cfg)
if ckpt: model.gradient_checkpointing_enable()
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for layer in model.model.layers: fully_shard(layer, mp_policy=mp)
fully_shard(model, mp_policy=mp)
model.to_empty(device="cuda")
with torch.no_grad():
    for p in model.parameters(): p.normal_(0, 0.02)
rope = model.model.rotary_emb  # recompute rope buffers after to_empty
inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, device="cuda").float() / 128))
rope.inv_freq.copy_(inv)
if hasattr(rope, "original_inv_freq"): rope.original_inv_freq = inv
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
nparams = sum(p.numel() for p in model.parameters()) * world  # sharded -> approx total
N = 8.03e9; emb = cfg.vocab_size * cfg.hidden_size
flops_per_token = 6 * (N - emb) + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq  # Megatron-style incl. attention
times = []
for i in range(steps):
    xs = [torch.randint(0, cfg.vocab_size, (mbs, seq), device="cuda") for _ in range(accum)]
    torch.cuda.synchronize(); t = time.perf_counter()
    for x in xs:
        out = model(input_ids=x, labels=x); (out.loss / accum).backward()
    opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); times.append(time.perf_counter() - t)
    if rank == 0: print(f"step {i} {times[-1]:.3f}s loss {out.loss.item():.3f}", flush=True)
meas = sorted(times[3:]); med = meas[len(meas) // 2]
tps_gpu = accum * mbs * seq / med
mfu = tps_gpu * flops_per_token / 989e12
if rank == 0:
    print(f"RESULT seq {seq} mbs {mbs} accum {accum} ckpt {ckpt} world {world}: step {med:.3f}s tokens/s/GPU {tps_gpu:.0f} "
          f"TFLOP/s/GPU {tps_gpu*flops_per_token/1e12:.0f} MFU {mfu:.1%} peak mem {torch.cuda.max_memory_allocated()/2**30:.1f} GiB", flush=True)
dist.destroy_process_group()
