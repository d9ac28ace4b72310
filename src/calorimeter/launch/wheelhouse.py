"""Build a wheelhouse for offline compute nodes: this environment's packages as wheels for a target Python/platform.

Usage::

    python -m calorimeter.launch.wheelhouse --python-version 3.12 --platform manylinux2014_x86_64 --dest wheelhouse
    # on the offline node:
    pip install --no-index --find-links wheelhouse -e .          (or: WHEELHOUSE=wheelhouse make setup)

Every distribution installed here (pinned to the version installed here) is downloaded as a binary wheel for the
target; packages published only as source (e.g. deepspeed) are built into a wheel locally, without compiling ops.
torch and the CUDA runtime wheels are skipped by default: GPU nodes bring their own CUDA build of torch.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

DEFAULT_SKIP = ("torch", "triton", "nvidia-*", "calorimeter", "pytest", "ruff", "iniconfig", "pluggy")
PLATFORM_TAGS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014", "manylinux1")


def installed(skip: tuple[str, ...]) -> dict[str, str]:
    """Distributions of this environment (name -> version), minus the skipped name patterns."""
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or any(fnmatch.fnmatch(name.lower().replace("_", "-"), p) for p in skip):
            continue
        out[name.lower().replace("_", "-")] = dist.version.split("+")[0]
    return dict(sorted(out.items()))


def _platforms(platform: str) -> list[str]:
    arch = platform.split("_", 1)[1] if platform.startswith("manylinux") and "x86_64" in platform else "x86_64"
    tags = [platform] + [f"{t}_{arch}" for t in PLATFORM_TAGS]
    return list(dict.fromkeys(tags))


def download(name: str, version: str, dest: Path, python_version: str, platform: str) -> bool:
    """Fetch one binary wheel for the target; False when none exists."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--implementation",
           "cp", "--python-version", python_version, "-d", str(dest), f"{name}=={version}"]
    for p in _platforms(platform):
        cmd += ["--platform", p]
    return subprocess.run(cmd, capture_output=True, text=True).returncode == 0


def build(name: str, version: str, dest: Path) -> bool:
    """Build a wheel from source (pure Python packages; DeepSpeed without its ops)."""
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dest),
           f"{name}=={version}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env).returncode == 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    ap.add_argument("--platform", default="manylinux2014_x86_64")
    ap.add_argument("--dest", type=Path, default=Path("wheelhouse"))
    ap.add_argument("--skip", action="append", default=[], help="name pattern to leave out (repeatable)")
    ap.add_argument("--only", action="append", default=[], help="only these names (repeatable)")
    ap.add_argument("--project", action="store_true", help="also build this project's own wheel")
    args = ap.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    dists = installed(DEFAULT_SKIP + tuple(args.skip))
    if args.only:
        dists = {k: v for k, v in dists.items() if k in {o.lower().replace("_", "-") for o in args.only}}
    failed = []
    for i, (name, version) in enumerate(dists.items(), 1):
        ok = download(name, version, args.dest, args.python_version, args.platform) or build(name, version,
                                                                                              args.dest)
        print(f"[{i}/{len(dists)}] {name}=={version} {'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            failed.append(name)
    if args.project:
        root = Path(__file__).resolve().parents[3]
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(args.dest), str(root)],
                       check=True)
    print(f"{len(dists) - len(failed)} wheels in {args.dest}" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
