"""The ring-overlapped sequence-parallel linears compute exactly what all-gather/reduce-scatter + GEMM compute.

Every rank of a gloo group (2 and 3 ranks: one and two ring hops; the ring at 4 ranks is in the full-model check, and
nothing of the symmetric-memory wiring depends on the group's size) holds the same full tensors (float64), runs the
ring functions on its shards with autograd, and compares its output shard and its gradient shards with the plain
computation on the full tensors. The full-model check (losses, every gradient, tp2/tp2 x pp2/tp2 + ZeRO-3 with
overlap on) is in tests/test_parallel_equivalence.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration


def _worker(out: Path, mode: str) -> None:
    import torch
    import torch.distributed as dist

    from calorimeter.train.tp_overlap import Ring, SymmMemTP, _on_one_host, all_gather_linear, linear_reduce_scatter

    dist.init_process_group("gloo")
    rank, tp = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(tp)))
    ring = Ring(group) if mode == "ring" else SymmMemTP(group)
    gen = torch.Generator().manual_seed(7)
    s, b, h, f = 4 * tp, 2, 6, 5 * tp  # sequence, batch, hidden, ffn (split over tp)
    n, fl = s // tp, f // tp
    opts = {"dtype": torch.float64, "generator": gen}
    x = torch.randn(s, b, h, **opts)
    w1, b1 = torch.randn(f, h, **opts), torch.randn(f, **opts)  # column-parallel: rows split
    w2, b2 = torch.randn(h, f, **opts), torch.randn(h, **opts)  # row-parallel: columns split
    gy = torch.randn(s, b, h, **opts)

    # reference on the full tensors: y = (x W1^T + b1) W2^T + b2, loss = <y, gy>
    ref = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    y_ref = (ref[0] @ ref[1].t() + ref[2]) @ ref[3].t() + ref[4]
    (y_ref * gy).sum().backward()

    # this rank's pieces
    rows, cols = slice(rank * n, (rank + 1) * n), slice(rank * fl, (rank + 1) * fl)
    xs = x[rows].clone().requires_grad_()
    w1s, b1s = w1[cols].clone().requires_grad_(), b1[cols].clone().requires_grad_()
    w2s, b2s = w2[:, cols].clone().requires_grad_(), b2.clone().requires_grad_()
    # (s, b, f/tp); the bias added in place, as the model's next ops change a linear's output in place (autograd
    # refuses that on an output that is a view: the fused ops' reference returns one)
    hidden = all_gather_linear(xs, w1s, None, ring)
    hidden.add_(b1s)
    ys = linear_reduce_scatter(hidden, w2s, b2s, ring)  # (s/tp, b, h)
    (ys * gy[rows]).sum().backward()
    b2_grad = b2s.grad.clone()
    dist.all_reduce(b2_grad)  # a replicated bias added to a sequence shard: partial gradients (SP's hook sums them)

    def err(a: torch.Tensor, want: torch.Tensor) -> float:
        return float((a - want).norm() / want.norm())

    result = {
        "shapes": [list(hidden.shape), list(ys.shape)],
        "y": err(ys.detach(), y_ref.detach()[rows]),
        "x": err(xs.grad, ref[0].grad[rows]),
        "w1": err(w1s.grad, ref[1].grad[cols]),
        "b1": err(b1s.grad, ref[2].grad[cols]),
        "w2": err(w2s.grad, ref[3].grad[:, cols]),
        "b2": err(b2_grad, ref[4].grad),
    }
    result["one_host"] = _on_one_host(group.group_name)
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("mode", "tp"), [("ring", 2), ("ring", 3), ("symm_mem", 2)])
def test_overlapped_linears_match_collectives_and_gemm(tmp_path: Path, mode: str, tp: int) -> None:
    """The ring, and the symmetric-memory path's wiring (on gloo: PyTorch's reference of the fused ops)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(tp),
           "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, str(tmp_path), mode], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(tp)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    for r in range(tp):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        s = 4 * tp
        assert got.pop("shapes") == [[s, 2, 5], [4, 2, 6]]
        assert got.pop("one_host") is True
        assert all(e < 1e-12 for e in got.values()), (r, got)


def test_unknown_tp_overlap_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from calorimeter.train.tp_overlap import ENV_TP_OVERLAP, tp_overlap_mode

    monkeypatch.delenv(ENV_TP_OVERLAP, raising=False)
    assert tp_overlap_mode() == "ring"  # auto, without torch.distributed
    monkeypatch.setenv(ENV_TP_OVERLAP, "symm_mem")
    assert tp_overlap_mode() == "symm_mem"
    monkeypatch.setenv(ENV_TP_OVERLAP, "nvls")
    with pytest.raises(ValueError, match="CALORIMETER_TP_OVERLAP='nvls'"):
        tp_overlap_mode()


@pytest.mark.parametrize(("backend", "one_host", "want"),
                         [("nccl", True, "symm_mem"), ("nccl", False, "ring"), ("gloo", True, "ring")])
def test_auto_overlap_takes_symmetric_memory_on_one_nccl_host(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                               one_host: bool, want: str) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    from calorimeter.train import tp_overlap

    class Group:
        group_name = "tp-group"

    monkeypatch.delenv(tp_overlap.ENV_TP_OVERLAP, raising=False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(parallel_state, "model_parallel_is_initialized", lambda: True)
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_group", lambda: Group())
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(tp_overlap, "_on_one_host", lambda name: one_host and name == "tp-group")
    assert tp_overlap.tp_overlap_mode() == want
    monkeypatch.setenv(tp_overlap.ENV_TP_OVERLAP, "ring")  # an explicit choice wins
    assert tp_overlap.tp_overlap_mode() == "ring"


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2])
