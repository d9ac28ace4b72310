"""Time to fail for a dead peer on CPU ranks: a rank SIGKILLed before it announces itself, before the rendezvous,
while training, or as it writes its result; time from the kill to the attempt's record (run.json), over repeated
runs: each run's time, then min / median / max.

    PYTHONPATH=src python bench/fail_fast.py --repeats 5 [--scenarios unannounced,rendezvous,step,result]
        [--out /tmp/ff] [--hardware auto]

Each run is one 2-rank tiny-gpt cell (DeepSpeed, gloo) through the local launcher (``calorimeter run-cell``). The
kill time is the dead rank's own timestamp (fault hooks ``kill-at``, printed to its log) or the moment this script
sends SIGKILL to rank 1: ``unannounced``, ``--start-s`` (0.5 s) after rank 1's process appeared (found under the
run-cell process by its submitit rank), while Python starts and imports, before it has written its alive file
(checked after the kill: a run where it had is an error; ``--start-s 0`` kills it at birth, before the launcher can
have seen it: the record then names no pid); ``step``, after rank 0 logged 3 steps. A run passes when its record
names rank 1 with class ``peer_died``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


SCENARIOS = ("unannounced", "rendezvous", "step", "result")


def _sweep(out: Path, repeats: int, hardware: str) -> tuple[Path, dict[str, list[str]]]:
    """The sweep: per scenario ``repeats`` cells (distinct global batches); the in-step cell trains 3000 steps."""
    cfg = out / "ff.yaml"
    gb = {s: [2 * (i + 1 + k * repeats) for i in range(repeats)] for k, s in enumerate(("rendezvous", "result",
                                                                                         "unannounced", "step"))}
    cfg.write_text(yaml.safe_dump({
        "sweep": "ff", "hardware": hardware, "results_dir": str(out / "results"), "memory_check": False,
        "telemetry": {"profile_steps": 0}, "launcher": {"executor": "local", "timeout_min": 15, "poll_s": 2},
        "defaults": {"model": "tiny-gpt", "gpus_per_node": 2, "micro_batch": 1, "warmup_steps": 1,
                     "measured_steps": 2, "seq_len": 32},
        "grid": [{"global_batch": gb["rendezvous"] + gb["result"] + gb["unannounced"]},
                 {"global_batch": gb["step"], "measured_steps": 3000}]}))
    from calorimeter.plan.plan import plan_file

    by_gb = {pc.cell.global_batch: pc.cell.cell_id for pc in plan_file(cfg).cells}
    return cfg, {s: [by_gb[g] for g in gbs] for s, gbs in gb.items()}


def _rank_pid(root: int, rank: int) -> int | None:
    """The pid of rank ``rank`` of the local job under process ``root`` (run-cell), once it exists."""
    from calorimeter.launch.watch import local_ranks

    return local_ranks(root).get(rank)


def _one(cfg: Path, cell_id: str, scenario: str, start_s: float = 0.5) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                        if p)}  # keep an offline node's wheels (/tmp/site)
    if scenario in ("rendezvous", "result"):
        env["CALORIMETER_TEST_FAULTS"] = f"{cell_id}=kill-at:{scenario}@1"
    cells = cfg.parent / "results" / "ff" / "cells" / cell_id
    proc = subprocess.Popen([sys.executable, "-m", "calorimeter", "run-cell", str(cfg), cell_id], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t_kill = None
    try:
        if scenario == "unannounced":
            while (pid := _rank_pid(proc.pid, 1)) is None:
                if proc.poll() is not None:
                    raise RuntimeError(f"run-cell ended (exit {proc.returncode}) before rank 1 started")
                time.sleep(0.01)
            time.sleep(start_s)
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
            if list(cells.glob("attempts/*/staging/alive-1.json")):
                raise RuntimeError("rank 1 had announced itself before it was killed: not this scenario")
        if scenario == "step":
            while True:
                prog = sorted(cells.glob("attempts/*/staging/restart0/progress.jsonl"))
                if prog and len(prog[0].read_text().splitlines()) >= 3:
                    break
                time.sleep(0.2)
            alive = json.loads(next(cells.glob("attempts/*/staging/alive-1.json")).read_text())
            t_kill = time.time()
            os.kill(alive["pid"], signal.SIGKILL)
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    attempt = next(cells.glob("attempts/*/run.json")).parent
    rec = json.loads((attempt / "run.json").read_text())
    if t_kill is None:
        logs = "".join(p.read_text() for p in (attempt / "submitit").glob("*_1_log.out"))
        t_kill = float(re.search(r"kills itself at \w+ t=([\d.]+)", logs).group(1))
    if rec["failure_class"] != "peer_died" or not rec["reason"].startswith("rank 1 "):
        raise RuntimeError(f"{cell_id}: the record does not name rank 1 as dead: {rec['failure_class']}: "
                           f"{rec['reason']}")
    if scenario == "unannounced" and "(pid " in rec["reason"] and f"(pid {pid})" not in rec["reason"]:
        raise RuntimeError(f"{cell_id}: the record names another pid than the killed {pid}: {rec['reason']}")
    return (attempt / "run.json").stat().st_mtime - t_kill, f"{rec['failure_class']}: {rec['reason']}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--hardware", default="cpu", help="cpu (gloo) or auto (the GPUs of this node, NCCL)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--start-s", type=float, default=0.5,
                   help="unannounced: seconds after rank 1's process appeared (0: at once)")
    args = p.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        p.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="fail-fast-"))
    out.mkdir(parents=True, exist_ok=True)
    cfg, ids = _sweep(out, args.repeats, args.hardware)
    for scenario in scenarios:
        times = []
        for cell_id in ids[scenario]:
            s, why = _one(cfg, cell_id, scenario, args.start_s)
            times.append(s)
            print(f"  {scenario:<11} {s:6.2f} s  {why[:110]}", flush=True)
        print(f"{scenario:<11} kill to record over {len(times)} runs: {', '.join(f'{t:.1f}' for t in times)} s; "
              f"min {min(times):.2f} s, median {statistics.median(times):.2f} s, max {max(times):.2f} s", flush=True)


if __name__ == "__main__":
    main()
