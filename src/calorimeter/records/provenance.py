"""Provenance of a cell: git commit, package versions, hosts, GPUs and driver."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import time
from pathlib import Path

from calorimeter.plan.json_types import JsonObject

PACKAGES = ("calorimeter", "torch", "deepspeed", "megatron-core", "zeus", "submitit", "snakemake", "nvidia-ml-py",
            "numpy", "pandas", "pyarrow")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape a measurement."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


#: the file, in a cell folder and its attempt folder, holding ``git diff HEAD`` of a run from a modified tree
PATCH_NAME = "source.patch"


#: tracked paths left out of a record's patch: measurements, not the code that measures (a device node whose git
#: metadata predated a re-encoding of the committed reference data wrote a 60 MB patch per cell)
PATCH_EXCLUDES: tuple[str, ...] = ("results/",)


#: the options of every ``git diff`` that makes or rebuilds a record's patch: binary changes included (with full
#: object names; a text file's ``index`` line has them abbreviated, to git's default length in that repository)
DIFF_OPTIONS: tuple[str, ...] = ("--binary", "--no-color", "--no-ext-diff")


def diff_pathspec(excludes: tuple[str, ...] | list[str] = PATCH_EXCLUDES) -> list[str]:
    """The pathspec of a record's patch: the whole tree less ``excludes`` (a record names its own
    ``patch_excludes``; records written before there were any name none)."""
    return ["--", ":(top)", *(f":(top,exclude){p}" for p in excludes)]


def git_text(args: list[str], repo: Path | None = None) -> str:
    """``git ARGS`` as text, the way a record's patch was read (the locale's decoding, universal newlines): its
    ``.encode()`` are the bytes whose SHA-256 the record names. Raises :class:`subprocess.SubprocessError` or
    :class:`OSError` when git fails."""
    return subprocess.run(["git", *args], cwd=str(repo or Path.cwd()), capture_output=True, text=True, timeout=120,
                          check=True).stdout


def git_patch(repo: Path | None = None) -> str | None:
    """``git diff HEAD`` of the tracked files (binary changes included) outside :data:`PATCH_EXCLUDES`, followed by
    each untracked file that git does not ignore as a new file (``git diff --no-index /dev/null FILE``): what a
    modified tree adds to its commit's code, so that ``git apply`` on the commit gives it back.

    None outside git; an empty string for a clean tree.
    """
    try:
        tracked = git_text(["diff", "HEAD", *DIFF_OPTIONS, *diff_pathspec()], repo)
        untracked = git_text(["ls-files", "--others", "--exclude-standard", "-z", *diff_pathspec()], repo)
    except (OSError, subprocess.SubprocessError):
        return None
    new = []
    for name in sorted(f for f in untracked.split("\0") if f):
        # --no-index exits 1 when the two sides differ, which a new file always does
        r = subprocess.run(["git", "diff", "--no-index", *DIFF_OPTIONS, "--", "/dev/null", name],
                           cwd=str(repo or Path.cwd()), capture_output=True, text=True, timeout=120)
        if r.returncode not in (0, 1):
            return None
        new.append(r.stdout)
    return tracked + "".join(new)


def git_state(repo: Path | None = None) -> JsonObject:
    """Commit and dirtiness of the working tree the workflow runs from (None outside git): a tree is dirty when,
    outside :data:`PATCH_EXCLUDES` (the measurements), a tracked file changed or an untracked file that git does not
    ignore lies in it (a new config or module is code the run used): exactly when :func:`git_patch` is not empty."""
    cwd = str(repo or Path.cwd())
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", *diff_pathspec()],
                                    cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def cpu_model() -> str:
    """The host processor's model name (``/proc/cpuinfo``; else what :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_cpu() -> JsonObject:
    """The host a rank runs on, as far as it sets a host-bound cell's speed (the host issues every kernel; the same
    configuration took 1.2-1.4x longer on one 2x H200 machine than on another: docs/projection.md): the processor
    model, its logical CPUs, those this process may use, and the maximum clock in MHz where the kernel exposes it
    (absent in many VMs: None)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        max_mhz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip()) / 1000.0
    except (OSError, ValueError):
        max_mhz = None
    return {"model": cpu_model(), "logical_cpus": os.cpu_count(), "usable_cpus": usable, "max_mhz": max_mhz}


#: tiny operations a rank issues to time its host (:func:`host_dispatch`), and the repetitions of that loop
DISPATCH_OPS = 2000
DISPATCH_REPEATS = 3


def host_dispatch(device: str, ops: int = DISPATCH_OPS, repeats: int = DISPATCH_REPEATS) -> JsonObject:
    """How fast this rank's host issues work: microseconds of host time per tiny operation (an in-place add on a
    one-element tensor of the rank's device), the median of ``repeats`` loops of ``ops``, the device synchronised
    before each loop and not inside it (on a GPU the loop times the host's dispatch and kernel launch, not the kernels).
    In the host-bound regime the iteration lasts as long as the host takes to issue it, and the same configuration
    took 0.72-1.07 s on four 2x H200 machines whose records name the same CPU (docs/projection.md): this is the
    machine's host speed, measured. About 0.1 s per rank. ``{"dispatch_unavailable": why}`` where it cannot run."""
    try:
        import torch  # heavy: only ranks that already run torch call this

        x = torch.zeros(1, device=device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        per_op = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(ops):
                x.add_(1.0)
            per_op.append((time.perf_counter() - t0) / ops * 1e6)
            sync()
        return {"dispatch_us_per_op": float(sorted(per_op)[len(per_op) // 2]), "dispatch_ops": ops,
                "dispatch_repeats": repeats}
    except Exception as e:  # noqa: BLE001 - a probe that cannot run leaves the record without it, saying why
        return {"dispatch_unavailable": f"{type(e).__name__}: {e}"}


def device_info(device: str) -> JsonObject:
    """Name, UUID and driver of this rank's device through NVML; for CPU ranks the processor."""
    if not device.startswith("cuda"):
        return {"kind": "cpu", "name": cpu_model()}
    info: JsonObject = {"kind": "cuda", "torch_device": device}
    try:
        import torch

        idx = torch.cuda.current_device()
        info["name"] = torch.cuda.get_device_name(idx)
        info["cuda_runtime"] = torch.version.cuda
        import pynvml

        props = torch.cuda.get_device_properties(idx)
        torch_uuid = str(getattr(props, "uuid", "") or "")
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        match = [h for h in handles if torch_uuid and pynvml.nvmlDeviceGetUUID(h).endswith(torch_uuid)]
        handle = match[0] if match else handles[idx]
        info["uuid"] = pynvml.nvmlDeviceGetUUID(handle)
        info["nvml_index"] = pynvml.nvmlDeviceGetIndex(handle)
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as e:  # noqa: BLE001 - provenance must never fail a run
        info["unavailable"] = f"{type(e).__name__}: {e}"
    return info
