"""What a ``command`` cell ran: its command, the files it ran (with their SHA-256) and the packages it imported.

Two sources, both on rank 0 (every rank runs the same command):

* the command line: every word that names a file (``train.py``, ``--job.config_file=llama3_8b.toml``; environment
  variables expanded, relative paths from the rank's working folder), outside the Python installation and the
  system's folders, is hashed before the command starts;
* the command's Python processes: :mod:`calorimeter.command.hook` (first on their PYTHONPATH) reports at exit each
  process's interpreter, main file, the distributions and versions of the packages it imported, and the files of
  the modules it imported from outside any distribution (the trainer's own code), which are hashed here.

The result is ``command/provenance.json`` in the run's folder (:data:`PROVENANCE_JSON`), written when the command
has ended whatever its exit, and the record's ``command`` section.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path, PurePosixPath

from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import COMMAND_PROVENANCE

#: the folder of a run that holds the command's files (console and step logs, this record)
COMMAND_DIR = PurePosixPath(COMMAND_PROVENANCE).parent.name
#: the file rank 0 writes into it (the kind's provenance: :data:`calorimeter.plan.kinds.COMMAND_PROVENANCE`)
PROVENANCE_JSON = PurePosixPath(COMMAND_PROVENANCE).name
#: the folder of the reporting ``sitecustomize`` (:mod:`calorimeter.command.hook`)
HOOK_DIR = Path(__file__).resolve().parent / "hook"
#: the environment variable naming where the command's Python processes report
IMPORTS_ENV = "CALORIMETER_IMPORTS_DIR"
#: how the command is launched (the record's ``command.launcher``)
LAUNCHER = ("calorimeter: one process per rank, each running `bash -c <command>` with torchrun's environment (RANK, "
            "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
#: files larger than this are named but not hashed
MAX_HASH_BYTES = 1 << 30
#: folders whose files are the system's or the Python installation's, not the command's own
_SYSTEM = tuple(os.path.join(os.path.realpath(p), "") for p in
                {sys.prefix, sys.base_prefix, "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/dev", "/proc"})
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
#: where compilers put the modules they build while the command runs (Triton's and Inductor's caches): a file there
#: is the command's output, different on every machine, not its code; counted, not listed
_CACHE_ENV = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")
_CACHE_DIRS = ("~/.triton", "~/.cache")
_CACHE_PARTS = ("/torchinductor_",)


def _cache_roots(env: dict[str, str]) -> tuple[str, ...]:
    roots = [os.path.expanduser(d) for d in _CACHE_DIRS] + [env[k] for k in _CACHE_ENV if env.get(k)]
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


def is_compiler_cache(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` lies in a compiler's cache: below one of ``roots`` (:func:`_cache_roots`) or in an Inductor
    temporary folder."""
    real = os.path.realpath(path)
    return real.startswith(roots) or any(part in real for part in _CACHE_PARTS)


def shown_path(path: Path, cwd: Path) -> str:
    """How the record names a file: relative to the command's working folder where it lies below it, else below the
    home folder as ``~/...``, else absolute."""
    real = path.resolve()
    for base, prefix in ((cwd.resolve(), ""), (Path.home().resolve(), "~/")):
        try:
            return prefix + str(real.relative_to(base))
        except ValueError:
            continue
    return str(real)


def hook_env(env: dict[str, str], imports_dir: Path) -> dict[str, str]:
    """``env`` with the reporting hook first on PYTHONPATH, reporting into ``imports_dir``."""
    imports_dir.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path, IMPORTS_ENV: str(imports_dir)}


def file_entry(path: Path, cwd: Path, source: str) -> JsonObject:
    """A file as the record names it: its path (relative to ``cwd``, the command's working folder, where it lies
    below it), where it was found, its size and SHA-256."""
    real = path.resolve()
    entry: JsonObject = {"path": shown_path(real, cwd), "from": source}
    try:
        size = real.stat().st_size
        entry["bytes"] = size
        if size > MAX_HASH_BYTES:
            entry["sha256"] = None
            entry["note"] = f"not hashed: larger than {MAX_HASH_BYTES} bytes"
            return entry
        digest = hashlib.sha256()
        with real.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        entry["sha256"] = digest.hexdigest()
    except OSError as e:
        entry["sha256"] = None
        entry["note"] = f"not hashed: {e.strerror or e}"
    return entry


def _own_file(word: str, env: dict[str, str], cwd: Path) -> Path | None:
    text = _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word)
    if not text or "\n" in text:
        return None
    path = Path(text).expanduser()
    path = path if path.is_absolute() else cwd / path
    try:
        if not path.is_file():
            return None
    except OSError:
        return None
    real = os.path.realpath(path)
    return None if real.startswith(_SYSTEM) else Path(real)


def command_line_files(command: str, env: dict[str, str], cwd: Path) -> list[Path]:
    """The files the command line names (a word, or the value of ``--name=value``), outside the system's and the
    Python installation's folders, in order and once each."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    found: list[Path] = []
    for word in words:
        for part in (word, word.partition("=")[2]):
            path = _own_file(part, env, cwd) if part else None
            if path is not None and path not in found:
                found.append(path)
    return found


def read_reports(imports_dir: Path) -> list[JsonObject]:
    """The reports the command's Python processes wrote (:mod:`calorimeter.command.hook`), by pid."""
    reports = []
    for f in sorted(imports_dir.glob("imports-*.json")) if imports_dir.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            reports.append(doc)
    return reports


def command_provenance(command: str, env: dict[str, str], cwd: Path, imports_dir: Path,
                       named: list[JsonObject] | None = None) -> JsonObject:
    """The record's ``command`` section: the command, how it was launched, the files it ran (those its command line
    names, ``named``: :func:`file_entry` of each, taken before it started, else now; those its Python processes ran,
    hashed now), the distributions and versions they imported, their interpreters."""
    if named is None:
        named = [file_entry(p, cwd, "command line") for p in command_line_files(command, env, cwd)]
    seen = {str((cwd / Path(e["path"]).expanduser()).resolve()) for e in named}
    files: dict[Path, str] = {}
    cached: set[str] = set()
    roots = _cache_roots(env)
    reports = read_reports(imports_dir)
    packages: dict[str, str | None] = {}
    for r in reports:
        for path in [r.get("main"), *(r.get("files") or [])]:
            if not isinstance(path, str) or path.startswith(_SYSTEM) or path in seen or Path(path) in files:
                continue
            if is_compiler_cache(path, roots):
                cached.add(path)
                continue
            files[Path(path)] = "main file" if path == r.get("main") else "imported"
        packages.update({str(k): v for k, v in (r.get("distributions") or {}).items()})
    out: JsonObject = {
        "command": command, "launcher": LAUNCHER,
        "files": named + [file_entry(p, cwd, source) for p, source in files.items() if p.is_file()],
        "packages": dict(sorted(packages.items())),
        "python": sorted({f"{r.get('executable')} ({r.get('python')})" for r in reports}),
        "python_processes": len(reports),
    }
    if cached:
        out["compiler_cache_modules"] = len(cached)  # built while it ran (Triton, Inductor): not the command's code
    if not reports:
        out["packages_note"] = ("no Python process of the command reported its imports (not Python, started with "
                                "-S or -I, or killed before it exited)")
    return out
