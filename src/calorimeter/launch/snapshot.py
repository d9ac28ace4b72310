"""A snapshot of the package's code for queued SLURM jobs: a job runs the code of its submission, not whatever the
checkout holds when the queue starts it (submitit's ``RsyncSnapshot`` and NeMo-Run's ``GitArchivePackager`` do the
same for their jobs).

The ``calorimeter`` package this process imports is copied once per content (``.py`` and ``.yaml`` files, keyed by
their SHA-256) to ``<results>/<sweep>/code/<digest>/calorimeter``, and the job's script puts that folder first on
``PYTHONPATH``. Identical code is one copy however many cells and sweeps submit it; a changed file is a new copy.
Scripts a ``command`` cell runs (e.g. ``bench/peers/``) are the command's own and are not copied.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import calorimeter

#: files of the package the ranks may read
SNAPSHOT_SUFFIXES = (".py", ".yaml")


def package_files(root: Path | None = None) -> list[Path]:
    """The package's code files, sorted (``root``: the package folder, default the imported one)."""
    root = root or Path(calorimeter.__file__).parent
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SNAPSHOT_SUFFIXES
                  and "__pycache__" not in p.parts)


def code_digest(root: Path | None = None) -> str:
    """SHA-256 (16 hex digits) over the package's code files, names and contents."""
    root = root or Path(calorimeter.__file__).parent
    h = hashlib.sha256()
    for p in package_files(root):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def snapshot_code(sweep_dir: Path, root: Path | None = None) -> Path:
    """The folder to put first on ``PYTHONPATH`` (made on first use; a finished copy is never rewritten).

    Launchers of one sweep may make the same copy at once (cells submitted side by side): each copies into a folder
    of its own and renames it into place; the first rename wins and the others discard theirs, so that a job never
    imports a copy another launcher was still writing or had half deleted.
    """
    root = root or Path(calorimeter.__file__).parent
    dest = Path(sweep_dir) / "code" / code_digest(root)
    if (dest / "calorimeter" / "__init__.py").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        for p in package_files(root):
            target = tmp / "calorimeter" / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, target)
        try:
            tmp.rename(dest)  # atomic; fails when another launcher's finished copy is already in place
        except OSError:
            if not (dest / "calorimeter" / "__init__.py").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def with_snapshot(params: dict, sweep_dir: Path) -> tuple[dict, Path]:
    """SLURM parameters whose job imports the snapshot (a setup line first), and the snapshot's folder."""
    dest = snapshot_code(sweep_dir)
    first = f'export PYTHONPATH="{dest}${{PYTHONPATH:+:$PYTHONPATH}}"'
    return {**params, "setup": [first, *params.get("setup", [])]}, dest
