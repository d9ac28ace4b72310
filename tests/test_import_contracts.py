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


def test_projection_may_not_import_findings() -> None:
    """A projection rests on measurements, never on the study's claims: which machine a cell ran on comes from
    ``records.machines``, below both (the layers alone would let projection import findings)."""
    forbidden = [c for c in _contracts() if c["type"] == "forbidden"]
    assert any("calorimeter.projection" in c["source_modules"] and "calorimeter.findings" in c["forbidden_modules"]
               for c in forbidden)


def test_the_import_contracts_hold() -> None:
    """``lint-imports`` over this checkout (about 0.5 s); its report names the offending import chain."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def function_level_imports(root: Path = SRC) -> list[tuple[Path, int]]:
    """(file, line) of every import of a calorimeter module inside a function, cli.py aside (it imports each
    command's package only when the command runs)."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "cli.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                if any(n.split(".")[0] == "calorimeter" for n in names) or getattr(node, "level", 0):
                    found.append((path, node.lineno))
    return sorted(set(found))


def test_no_function_level_import_but_a_heavy_one() -> None:
    """An import inside a function must not dodge a cycle (the contracts above forbid cycles): the only ones left
    import torch or DeepSpeed, kept off the planning path, and say so in a comment on the line or the one above."""
    unexplained = []
    for path, line in function_level_imports():
        lines = path.read_text().splitlines()
        near = " ".join(lines[max(line - 3, 0):line]).lower()
        if "heavy" not in near:
            unexplained.append(f"{path.relative_to(ROOT)}:{line}: {lines[line - 1].strip()}")
    assert not unexplained, "function-level imports without a reason:\n" + "\n".join(unexplained)
