"""The environment files: the lock (pip constraints of `make setup`) covers every dependency of pyproject.toml at a
version its specifier allows, and the conda environment installs the checkout through the same lock."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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


def _post_deploy(cwd: Path, tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run envs/calorimeter.post-deploy.sh as Snakemake does (inside the environment, from snakemake's working
    directory), with a stand-in ``python`` first on PATH that records each ``python -m pip ...`` call."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = tmp / "calls.jsonl"
    stub = bin_dir / "python"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "envs" / "calorimeter.post-deploy.sh")], cwd=cwd, capture_output=True,
                       text=True, env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env},
                       timeout=60)
    got = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return r, got


def test_the_conda_environment_installs_the_checkout_through_the_lock(tmp_path: Path) -> None:
    """Every rule's conda environment: conda brings Python and pip only (Snakemake copies the file into
    .snakemake/conda/, so no path may stand in it); the post-deploy script next to it (the name Snakemake looks for)
    installs torch's pin and the checkout with the lock's constraints, from the checkout, and refuses elsewhere."""
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert [e.name for e in envs] == ["calorimeter.yaml"]
    doc = yaml.safe_load(envs[0].read_text())
    assert doc["dependencies"] == ["python=3.11", "pip"]
    rules = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert set(re.findall(r'conda:\s*"([^"]+)"', rules)) == {"../../envs/calorimeter.yaml"}

    r, calls = _post_deploy(ROOT, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    torch_pin = re.search(r"pip install[^\n]*torch==([0-9.]+)", (ROOT / "Makefile").read_text()).group(1)
    assert calls[0][:3] == ["-m", "pip", "install"] and f"torch=={torch_pin}" in calls[0]
    install = calls[1]
    c = install[install.index("-c") + 1]
    assert (ROOT / c).resolve() == LOCK  # relative to the checkout, where the script runs
    assert install[install.index("-e") + 1] == f".[{','.join(_setup_extras())}]".replace("test,", "")

    r, calls = _post_deploy(ROOT, tmp_path / "b", CALORIMETER_TORCH_SPEC="")  # a GPU node keeps its own torch
    assert r.returncode == 0 and len(calls) == 1 and "-e" in calls[0]

    r, calls = _post_deploy(tmp_path, tmp_path / "c")  # snakemake run from elsewhere: refused, nothing installed
    assert r.returncode == 1 and "run snakemake from the calorimeter checkout" in r.stderr and calls == []
