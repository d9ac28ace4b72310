"""The environment files: the lock (pip constraints of `make setup`) covers every dependency of pyproject.toml at a
version its specifier allows, and the conda environments install through the same lock."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "constraints-py311.txt"


def _setup_extras() -> list[str]:
    """The extras `make setup` installs (read from the Makefile's `-e ".[...]"`)."""
    m = re.search(r'-e "\.\[([a-z0-9_,-]+)\]"', (ROOT / "Makefile").read_text())
    assert m, "the Makefile installs the project with -e \".[extras]\""
    return m.group(1).split(",")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{LOCK.name}: {line!r} is not name==version"
            pins[_norm(name)] = version.strip()
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return reqs + [Requirement(r) for extra in _setup_extras() for r in project["optional-dependencies"][extra]]


def test_the_lock_covers_every_dependency_at_an_allowed_version() -> None:
    pins = _lock()
    for req in _requirements():
        if _norm(req.name) == "torch":
            continue  # pinned by the Makefile (CPU) or brought by the GPU node (CUDA build)
        assert _norm(req.name) in pins, f"{req.name} is not in {LOCK.name}: run `make lock`"
        assert req.specifier.contains(pins[_norm(req.name)], prereleases=True), (
            f"{LOCK.name} pins {req.name}=={pins[_norm(req.name)]}, pyproject.toml asks {req.specifier}")
    assert pins["megatron-core"] == "0.16.1"  # 0.17+ needs Python 3.12: the lock keeps both on the tested version
    assert "snakemake-executor-plugin-slurm" not in pins and "torch" not in pins


def test_make_setup_uses_the_lock_and_not_the_slurm_plugin() -> None:
    make = (ROOT / "Makefile").read_text()
    assert "LOCK ?= requirements/constraints-py311.txt" in make and "$(PIP_LOCK) -e \".[" in make
    assert {"test", "hf"} <= set(_setup_extras()) and "slurm" not in _setup_extras()


def test_conda_envs_install_through_the_lock() -> None:
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        doc = yaml.safe_load(env.read_text())
        conda = [d for d in doc["dependencies"] if isinstance(d, str)]
        pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict))
        assert conda == ["python=3.11", "pip"], f"{env.name}: conda installs only Python and pip"
        assert pip[0] == "-c ../requirements/constraints-py311.txt", env.name
        assert (env.parent / pip[0].split()[1]).resolve() == LOCK
        pinned = [p for p in pip if not p.startswith("-")]
        assert all("==" in p for p in pinned), f"{env.name}: unpinned {pinned}"
        assert "-e ..[hf]" in pip, env.name
