"""The layout the docs describe is the code's: README's layout names every package, workflow rule file and command,
and docs/architecture.md's layer table is the import-linter layers in pyproject.toml, in order (read from the files;
about 0.2 s)."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from calorimeter.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "calorimeter"


def _layout() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def _commands() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_readme_layout_names_every_package_rule_file_and_command() -> None:
    block = _layout()
    packages = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))
    assert not [p for p in packages if not re.search(rf"^\s+{p}/", block, re.M)], "packages missing from README"
    rules = sorted(p.stem for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert not [r for r in rules if not re.search(rf"\b{r}\b", block)], "rule files missing from README"
    cli = block.split("cli.py", 1)[1].split("calorimeter", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"[a-z][a-z-]*", cli))
    assert named == _commands(), f"README names {sorted(named)}, the command line has {sorted(_commands())}"


def test_architecture_layers_are_the_import_contracts() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    want = [{m.strip().removeprefix("calorimeter.") for m in layer.split("|")} for layer in layers]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (.+?) \| (.+) \|$", doc, re.M)
    got = [set(re.findall(r"`([a-z_]+)`", packages)) for _, packages, _ in rows]
    assert got == want, f"docs/architecture.md layers {got} are not pyproject.toml's {want}"
    assert [int(n) for n, _, _ in rows] == list(range(len(want), 0, -1))
    cli_row = next(r for n, p, r in rows if p == "`cli`")
    assert set(re.findall(r"`([a-z][a-z-]*)`", cli_row)) - {"calorimeter"} == _commands()
