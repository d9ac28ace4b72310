"""Kind ``command``: run a training command of your own on every rank, under the node sampler, and record its steps.

calorimeter is the command's launcher, as torchrun would be: every rank of the cell (one process per device, placed
and sampled like a training cell) runs ``bash -c <command>`` with torchrun's variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``: the cell's rendezvous port
plus one), ``CALORIMETER_STEP_LOG`` (this rank's step log, :mod:`calorimeter.command.steplog`) and the cell's shape
(``CALORIMETER_SEQ_LEN``, ``CALORIMETER_GLOBAL_BATCH``, ``CALORIMETER_MICRO_BATCH``, ``CALORIMETER_STEPS`` =
warm-up + measured steps, ``CALORIMETER_WARMUP_STEPS``, ``CALORIMETER_MODEL``, ``CALORIMETER_PRECISION``,
``CALORIMETER_PYTHON``: the rank's Python, with calorimeter's environment; ``CALORIMETER_MODEL_SPEC``: the declared
model's fields as JSON). So the
command is what torchrun would start on each rank (``python -m torchtitan.train ...``, ``python pretrain_gpt.py
...``), not ``torchrun`` itself.

With ``warmup: fixed`` (and on CPU ranks) the first ``warmup_steps`` logged steps are the warm-up; with ``warmup:
steady`` on GPUs the warm-up ends, after the command ran, at the first step after which every GPU's temperature was
steady (:func:`steady_warmup`, the engine's rule applied to the node sampler's readings: the slope over
``steady_window_s`` times the planned measured duration below 1 °C). Every later step is
measured (the command decides how many it runs; ``CALORIMETER_STEPS`` says how many the cell expects). A cell that
declares its ``model`` gets FLOPs, MFU and tokens/s by the same formulas as the engine's cells (a step log's
``tokens`` must then equal ``global_batch x seq_len``); the energy and power windows come from the measured steps'
times, as for training. A command that exits non-zero, logs no measured step, or breaks the protocol fails the cell
with its last console lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from calorimeter.command.provenance import (
    COMMAND_DIR,
    PROVENANCE_JSON,
    command_line_files,
    command_provenance,
    file_entry,
    hook_env,
)
from calorimeter.command.steplog import STEP_LOG_ENV, ConsoleParser, LoggedStep, StepLogWriter, read_step_log
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES, accelerator_of
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import get_model
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.metrics import step_times_s, throughput_metrics
from calorimeter.records.progress import ProgressWriter
from calorimeter.records.rank import RankContext, RankResult
from calorimeter.records.steadiness import slope_c_per_min
from calorimeter.train.steady import steady_enough, temperature_source

#: console lines of a failed command kept in the error
TAIL_LINES = 20


def command_env(cell: Cell, rank: int, world_size: int, local_rank: int, step_log: Path) -> dict[str, str]:
    """The environment of the command on one rank (see the module docstring)."""
    env = dict(os.environ)
    port = int(env.get("MASTER_PORT", "29500"))
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(cell.gpus_per_node), "GROUP_RANK": str(rank // cell.gpus_per_node),
        "MASTER_ADDR": env.get("MASTER_ADDR", "127.0.0.1"),
        # calorimeter's own process group holds MASTER_PORT
        "MASTER_PORT": str(port + 1 if port < 65535 else port - 1),
        STEP_LOG_ENV: str(step_log), "PYTHONUNBUFFERED": "1",
        "CALORIMETER_CELL_ID": cell.cell_id, "CALORIMETER_SEQ_LEN": str(cell.seq_len),
        "CALORIMETER_GLOBAL_BATCH": str(cell.global_batch), "CALORIMETER_MICRO_BATCH": str(cell.micro_batch),
        "CALORIMETER_STEPS": str(cell.warmup_steps + cell.measured_steps),
        "CALORIMETER_WARMUP_STEPS": str(cell.warmup_steps), "CALORIMETER_MODEL": cell.model,
        "CALORIMETER_PRECISION": cell.precision, "CALORIMETER_PYTHON": sys.executable,
    })
    if cell.model != "-":  # the declared model's shape, so that a script can build exactly it
        env["CALORIMETER_MODEL_SPEC"] = json.dumps(get_model(cell.model).to_dict())
    return env


def _die_with_parent() -> None:
    """In the child: end when the rank's process dies (a killed job must not leave the command on the GPU)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_process(command: str, env: dict[str, str], console: Path, parser: ConsoleParser | None,
                on_line: Any = None) -> tuple[int, list[str]]:
    """Run ``bash -c command``; its output goes to ``console`` and this process's stdout, line by line.

    Returns:
        (exit status, the last console lines).
    """
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(["bash", "-c", command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509
    try:
        with console.open("w") as out:
            assert proc.stdout is not None
            for line in proc.stdout:
                now = time.time()
                out.write(line)
                out.flush()
                print(line, end="", flush=True)
                tail.append(line.rstrip("\n"))
                if parser is not None:
                    step = parser.feed(line, now)
                    if step is not None and on_line is not None:
                        on_line(step)
        return proc.wait(), list(tail)
    finally:
        if proc.poll() is None:  # interrupted: end the command's whole session (torchrun's children included)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


class _StepLogTail:
    """Reports the steps of a growing step log to the progress file (rank 0), from a thread."""

    def __init__(self, path: Path, report: Any) -> None:
        self.path, self.report, self.seen = path, report, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            self.poll()

    def poll(self) -> None:
        try:
            steps = read_step_log(self.path)
        except ValueError:
            return  # a half-written line: read again next time
        for s in steps[self.seen:]:
            self.report(s)
        self.seen = max(self.seen, len(steps))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.poll()


def phases(cell: Cell, steps: list[LoggedStep], warmup_steps: int | None = None) -> list[JsonObject]:
    """Step rows as the engine records them: the first ``warmup_steps`` (default the cell's) warm-up, the rest
    measured."""
    n = cell.warmup_steps if warmup_steps is None else warmup_steps
    return [{"step": s.step, "phase": "warmup" if i < n else "measured", "loss": s.loss,
             "grad_norm": None, "time_s": s.time_s, "t_begin_s": s.t_begin_s, "t_end_s": s.t_end_s}
            for i, s in enumerate(steps)]


def steady_warmup(cell: Cell, steps: list[LoggedStep], readings: list[tuple[float, float]]
                  ) -> tuple[int, str, float]:
    """Warm-up steps of a ``warmup: steady`` command cell, decided after the command ran (its length is its own):
    the first step after which this GPU's temperature slope over ``steady_window_s`` times the planned measured
    duration (``measured_min_s``, or ``measured_steps`` at this step's time) is below the sensor's 1 °C, and at most
    ``steady_slope_c_per_min`` where that is set (at least ``warmup_steps`` steps and ``warmup_min_s`` seconds after
    the first step began), capped at ``warmup_max_steps`` steps and ``warmup_max_s`` seconds after the first step
    began, as the engine's cells decide while they run (:func:`calorimeter.train.steady.steady_enough`).

    Returns:
        (warm-up steps, reason, the slope at the boundary in °C/min (NaN where too early)).
    """

    if not steps:
        return 0, "no step", float("nan")
    t0 = steps[0].t_begin_s
    slope = float("nan")
    for i, s in enumerate(steps):
        n = i + 1  # steps done at the end of this one
        slope = slope_c_per_min([r for r in readings if r[0] <= s.t_end_s], s.t_end_s, cell.steady_window_s)
        if n >= cell.warmup_max_steps or s.t_end_s - t0 >= cell.warmup_max_s:
            return n, f"cap ({cell.warmup_max_steps} steps or {cell.warmup_max_s:g} s) before steady", slope
        if n >= cell.warmup_steps and s.t_end_s - t0 >= cell.warmup_min_s and steady_enough(cell, slope, s.time_s)[0]:
            return n, "steady", slope
    return len(steps), "never steady within the command's steps", slope


def command_metrics(cell: Cell, rank_steps: list[list[LoggedStep]], peak_tflops: float | None,
                    warmup_steps: int | None = None) -> JsonObject:
    """Throughput of the measured steps over all ranks (the slowest rank's time per step).

    Raises:
        RuntimeError: no measured step, or logged tokens that are not the cell's ``global_batch x seq_len``.
    """

    n_warm = cell.warmup_steps if warmup_steps is None else warmup_steps
    rows = [phases(cell, steps, n_warm) for steps in rank_steps]
    times = step_times_s(rows)
    if not times:
        n = max((len(s) for s in rank_steps), default=0)
        raise RuntimeError(f"the command logged {n} steps: with {n_warm} warm-up steps none is measured "
                           "(run more steps: CALORIMETER_STEPS tells the command how many the cell expects)")
    logged = sorted({s.tokens for steps in rank_steps for s in steps if s.tokens is not None})
    declared = cell.global_batch * cell.seq_len
    out: JsonObject = {"steps_logged": max(len(s) for s in rank_steps), "log_format": cell.log_format or "jsonl"}
    if cell.model != "-":
        if logged and logged != [declared]:
            raise RuntimeError(f"the command logged {logged} tokens per step, the cell declares global_batch x seq_len"
                               f" = {cell.global_batch} x {cell.seq_len} = {declared}: fix the cell (its FLOPs and "
                               "MFU would be wrong) or the command")
        out.update(throughput_metrics(cell, times, peak_tflops))
    else:
        import statistics

        t = statistics.fmean(times)
        out.update(measured_steps=len(times), iteration_time_s=t, iteration_time_median_s=statistics.median(times),
                   mfu_unavailable_reason="the cell declares no model (set `model:` for FLOPs and MFU)")
        if len(logged) == 1:
            out.update(tokens_per_s=logged[0] / t, tokens_per_s_per_gpu=logged[0] / t / cell.world_size)
    peaks = [s.max_memory_bytes for steps in rank_steps for s in steps if s.max_memory_bytes is not None]
    if peaks:
        out["peak_memory_bytes_logged"] = max(peaks)
    return out


def run_command(ctx: RankContext) -> RankResult:
    """Kind ``command`` on one rank (:func:`calorimeter.launch.task.run_kind`): run the command, return its steps;
    rank 0 also returns the cell's metrics from every rank's steps."""
    import torch.distributed as dist

    cell, run_dir = ctx.cell, ctx.run.root
    if not cell.command:
        raise ValueError(f"{cell.cell_id}: kind command needs `command`")
    rank, world, local_rank = ctx.rank.rank, ctx.rank.world_size, ctx.rank.local_rank
    folder = Path(run_dir) / COMMAND_DIR
    folder.mkdir(parents=True, exist_ok=True)
    step_log = folder / f"steps-rank{rank}.jsonl"
    step_log.unlink(missing_ok=True)
    fmt = cell.log_format or "jsonl"
    progress = ProgressWriter(ctx.run.progress, cell, 0, True) if rank == 0 else None
    count = [0]

    def report(s: LoggedStep) -> None:
        if progress is not None:
            progress(s.step, "warmup" if count[0] < cell.warmup_steps else "measured", s.t_begin_s, s.t_end_s)
        count[0] += 1

    t0 = time.time()
    parser = ConsoleParser(fmt, t0) if fmt != "jsonl" else None
    tail = _StepLogTail(step_log, report) if parser is None else None
    env = command_env(cell, rank, world, local_rank, step_log)
    imports, named = folder / "imports", None
    if rank == 0:  # what the command runs: the files it names now, what its Python processes imported at the end
        env = hook_env(env, imports)
        named = [file_entry(p, Path.cwd(), "command line") for p in command_line_files(cell.command, env, Path.cwd())]
    try:
        rc, last = run_process(cell.command, env, folder / f"console-rank{rank}.log", parser, report)
    finally:
        if tail is not None:
            tail.close()
        if rank == 0:
            write_json_atomic(folder / PROVENANCE_JSON,
                              command_provenance(cell.command, env, Path.cwd(), imports, named))
    if rc != 0:
        raise RuntimeError(f"the command exited with status {rc} on rank {rank}; its last lines:\n" + "\n".join(last))
    steps = parser.steps if parser is not None else read_step_log(step_log)
    warmup = _warmup(cell, steps, Path(run_dir), local_rank)
    if parser is not None:  # console steps: kept beside the console log, in the protocol's format
        w = StepLogWriter(step_log)
        for s in steps:
            w.step(s.step, s.t_begin_s, s.t_end_s, loss=s.loss)
    out = RankResult(steps=phases(cell, steps, warmup["steps"]), warmup=warmup,
                     command={"exit_code": rc, "wall_s": time.time() - t0})
    dist.barrier()  # every rank's step log is complete
    if rank == 0:
        # console formats: only the ranks that print have steps (torchtitan and Megatron print on rank 0)
        rank_steps = [read_step_log(folder / f"steps-rank{r}.jsonl") for r in range(world)]
        rank_steps = [s for s in rank_steps if s] or [steps]
        profile = PROFILES.get(cell.hardware)
        out.kind_metrics = {**command_metrics(cell, rank_steps, profile.peak_bf16_tflops if profile else None,
                                              warmup["steps"]),
                            "warmup_mode_used": warmup["mode_used"], "warmup_reason": warmup["reason"],
                            "warmup_steps_used": warmup["steps"]}
        out.peak_memory_bytes = out.kind_metrics.get("peak_memory_bytes_logged")
    return out


def _warmup(cell: Cell, steps: list[LoggedStep], run_dir: Path, local_rank: int) -> JsonObject:
    """The warm-up of this cell, agreed by every rank (the most warm-up steps any rank needs): ``steady`` from this
    GPU's temperature in the node sampler's stream where there is one, else the fixed ``warmup_steps``."""
    import torch
    import torch.distributed as dist

    source, note = (None, "no GPU temperature on a CPU rank")
    if cell.warmup == "steady" and accelerator_of(cell.hardware) != "cpu" and torch.cuda.is_available():
        source, note = temperature_source(run_dir, torch.device("cuda", local_rank))
    readings = source() if source is not None else []
    if cell.warmup == "steady" and readings:
        n, reason, slope = steady_warmup(cell, steps, readings)
        mode = "steady"
    else:
        n, reason, slope = min(cell.warmup_steps, len(steps)), "fixed" if cell.warmup == "fixed" else (
            f"fixed: {note}"), float("nan")
        mode = "fixed"
    agreed = torch.tensor([n], dtype=torch.int64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    return {"mode": cell.warmup, "mode_used": mode, "reason": reason, "steps": int(agreed.item()),
            "final_slope_c_per_min": None if slope != slope else slope, "temperature_source": note}
