"""Calibrate the NVML PCIe and NVLink byte counters against known transfers (PCIe receive volumes of
12-29 GB on middle pipeline stages of one node were unexplained: docs/findings.md, "PCIe byte counters").

Every rank reads its own GPU's counters (the sampler's NVML fields: NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES,
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX} over all links) before and after each phase; the phases move a known
number of bytes, or none:

  idle          nothing for 2 s (the counters' drift)
  h2d, d2h      rank 0 copies S bytes from / to pinned host memory           (PCIe rx / tx = S on rank 0)
  peer_copy     rank 0 copies S bytes to the next GPU (cudaMemcpyPeer)       (NVLink; PCIe ~0)
  nccl_send     rank 0 sends S bytes to rank 1 with NCCL                     (NVLink; PCIe ~0)
  nccl_wait     rank 1 waits 3 s in an NCCL recv that rank 0 serves late     (nothing moves: does waiting count?)
  allreduce     all ranks all-reduce S bytes                                  (NVLink 2 S (n-1)/n)
  pp_middle     (3 ranks or more) rank k receives from k-1 while sending to k+1, chunk by chunk, as a middle
                pipeline stage does                                            (NVLink S each way; PCIe ~0)

Writes ``$OUT/pcie_calibration.csv`` (one row per phase and rank: seconds, expected and measured bytes) after every
phase, so a cut run keeps what it measured, and prints a summary. Run with NCCL_DEBUG=INFO to record the NCCL
transports (P2P/CUMEM, SHM, ...) next to it.

  torchrun --nproc_per_node 2 bench/gpu/pcie_calibration.py --size-gib 2        # GPU node (~40 s with setup)
  torchrun --nproc_per_node 2 bench/gpu/pcie_calibration.py --cpu --size-gib 0.01   # CPU dry run (gloo, no NVML)
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from calorimeter.telemetry.counters import unwrap_counter

COUNTERS = ("pcie_rx_bytes", "pcie_tx_bytes", "nvlink_rx_kib", "nvlink_tx_kib")


def counter_reader(device: int):  # noqa: ANN201 - returns a callable
    """A function returning this GPU's counters (NaN each where NVML or the field is unavailable)."""
    try:
        import pynvml

        from calorimeter.telemetry.gpu_nvidia import _field_specs, _field_value

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        specs = [s for s in _field_specs(pynvml) if s[0] in COUNTERS]
        ids = [fid for _, fid, _ in specs]

        def read() -> dict[str, float]:
            vals = pynvml.nvmlDeviceGetFieldValues(h, ids)
            out = {}
            for (name, _, _), fv in zip(specs, vals, strict=True):
                v = _field_value(pynvml, fv)
                out[name] = float(v) if isinstance(v, int | float) else float("nan")
            return out

        return read
    except Exception as e:  # CPU dry run, or a node without NVML: the choreography still runs
        print(f"rank {os.environ.get('RANK')}: no NVML counters ({type(e).__name__}: {e})", flush=True)
        return lambda: dict.fromkeys(COUNTERS, float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gib", type=float, default=2.0, help="bytes moved per phase, GiB")
    ap.add_argument("--cpu", action="store_true", help="CPU dry run: gloo, CPU tensors, no NVML")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder of pcie_calibration.csv")
    args = ap.parse_args()
    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cpu") if args.cpu else torch.device("cuda", local)
    if not args.cpu:
        torch.cuda.set_device(dev)
    read = (lambda: dict.fromkeys(COUNTERS, float("nan"))) if args.cpu else counter_reader(local)
    size = int(args.size_gib * 2**30) // 4 * 4
    n = size // 4
    buf = torch.ones(n, dtype=torch.float32, device=dev)
    host = torch.empty(n, dtype=torch.float32, pin_memory=not args.cpu)
    rows: list[dict] = []
    out = Path(args.out) / "pcie_calibration.csv"

    def sync() -> None:
        if not args.cpu:
            torch.cuda.synchronize()
        dist.barrier()

    def phase(name: str, fn, expect: dict[str, float]) -> None:  # noqa: ANN001 - the phase's work
        sync()
        before, t0 = read(), time.perf_counter()
        fn()
        sync()
        secs, after = time.perf_counter() - t0, read()
        row = {"phase": name, "rank": rank, "world": world, "seconds": secs, "bytes": size}
        for c in COUNTERS:
            scale = 1024.0 if c.endswith("_kib") else 1.0
            # the PCIe byte counters are 32-bit: 2 GiB can wrap them once (read as -1.98 GB on 2026-11-23)
            width = 32 if c.startswith("pcie") else 64
            seq = unwrap_counter([before[c], after[c]], width)
            row[c.replace("_kib", "_bytes")] = (seq[-1] - seq[0]) * scale
        for k in ("pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx"):
            row[f"expected_{k}"] = expect.get(k, 0.0)
        gathered = [None] * world
        dist.all_gather_object(gathered, row)
        if rank == 0:
            rows.extend(gathered)
            tmp = out.with_suffix(".tmp")
            with tmp.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            tmp.replace(out)
            for r in gathered:
                print(f"{name:<10} rank {r['rank']} {r['seconds']:6.2f} s  PCIe rx {r['pcie_rx_bytes'] / 1e9:8.3f} "
                      f"tx {r['pcie_tx_bytes'] / 1e9:8.3f} GB (expected {r['expected_pcie_rx'] / 1e9:.3f}/"
                      f"{r['expected_pcie_tx'] / 1e9:.3f})  NVLink rx {r['nvlink_rx_bytes'] / 1e9:8.3f} "
                      f"tx {r['nvlink_tx_bytes'] / 1e9:8.3f} GB (expected {r['expected_nvlink_rx'] / 1e9:.3f}/"
                      f"{r['expected_nvlink_tx'] / 1e9:.3f})", flush=True)

    on = lambda r, d: d if rank == r else {}  # noqa: E731 - expectation of one rank only
    phase("idle", lambda: time.sleep(2.0), {})
    phase("h2d", lambda: buf.copy_(host, non_blocking=True) if rank == 0 else None, on(0, {"pcie_rx": size}))
    phase("d2h", lambda: host.copy_(buf, non_blocking=True) if rank == 0 else None, on(0, {"pcie_tx": size}))
    if not args.cpu and world > 1:
        peer = torch.device("cuda", (local + 1) % torch.cuda.device_count())
        dst = torch.empty(n, dtype=torch.float32, device=peer) if rank == 0 else None
        phase("peer_copy", lambda: dst.copy_(buf) if rank == 0 else None,
              {**on(0, {"nvlink_tx": size}), **on(1, {"nvlink_rx": size})})
        del dst
    if world > 1:
        phase("nccl_send", lambda: dist.send(buf, 1) if rank == 0 else (dist.recv(buf, 0) if rank == 1 else None),
              {**on(0, {"nvlink_tx": size}), **on(1, {"nvlink_rx": size})})
        small = torch.zeros(1, device=dev)

        def late() -> None:
            if rank == 0:
                time.sleep(3.0)
                dist.send(small, 1)
            elif rank == 1:
                dist.recv(small, 0)

        phase("nccl_wait", late, {})
        ring = 2.0 * size * (world - 1) / world
        phase("allreduce", lambda: dist.all_reduce(buf), {"nvlink_rx": ring, "nvlink_tx": ring})
    if world > 2:
        chunks = 16
        pieces = list(buf.chunk(chunks))
        inbox = [torch.empty_like(p) for p in pieces]

        def chain() -> None:
            for p, q in zip(pieces, inbox, strict=True):
                ops = []
                if rank > 0:
                    ops.append(dist.P2POp(dist.irecv, q, rank - 1))
                if rank < world - 1:
                    ops.append(dist.P2POp(dist.isend, p, rank + 1))
                for req in dist.batch_isend_irecv(ops):
                    req.wait()

        phase("pp_middle", chain, {"nvlink_rx": size * (rank > 0), "nvlink_tx": size * (rank < world - 1)})
    dist.barrier()
    if rank == 0:
        print(f"wrote {out}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
