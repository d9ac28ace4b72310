"""The package layering is enforced, not a convention: import-linter's contracts in pyproject.toml hold, and they
name every package of calorimeter, so a new package cannot sit outside the layers unnoticed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "calorimeter"


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_package_is_in_a_layer() -> None:
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {m.strip() for layer in layers for m in layer.replace(":", "|").split("|")}
    packages = {f"calorimeter.{p.parent.name}" for p in SRC.glob("*/__init__.py")}
    modules = {f"calorimeter.{p.stem}" for p in SRC.glob("*.py") if p.name != "__init__.py"}
    assert packages | modules == named


def test_the_import_contracts_hold() -> None:
    """``lint-imports`` over this checkout (about 0.5 s); its report names the offending import chain."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
