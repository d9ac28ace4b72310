"""The environment files: the hashed locks (CPU: what `make setup` installs; GPU: the environment of the committed
records) cover every dependency of pyproject.toml at a version its specifier allows, the conda environment and the
container recipes install through them."""

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
LOCK = ROOT / "requirements" / "lock-cpu-py311.txt"
GPU_LOCK = ROOT / "requirements" / "lock-gpu-py312.txt"
#: the extras of the GPU lock (requirements/lock.sh): what the container recipes can run
GPU_EXTRAS = ["gpu", "test", "hf", "lora", "peers"]


def _setup_extras() -> list[str]:
    """The extras `make setup` installs (the Makefile's ``EXTRAS``)."""
    m = re.search(r"^EXTRAS \?= ([a-z0-9_,-]+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "the Makefile names the extras it installs: EXTRAS ?= a,b"
    return m.group(1).split(",")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(path: Path = LOCK) -> dict[str, str]:
    """A hashed lock's pins (name -> version); every pin carries at least one --hash."""
    text = path.read_text()
    pins = {}
    for block in re.split(r"\n(?=\S)", text):
        if block.startswith("#") or not block.strip():
            continue
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        assert m, f"{path.name}: {block.splitlines()[0]!r} is not name==version"
        assert "--hash=sha256:" in block, f"{path.name}: {m.group(1)} has no hash"
        pins[_norm(m.group(1))] = m.group(2)
    return pins


def _requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return reqs + [Requirement(r) for extra in extras for r in project["optional-dependencies"][extra]]


def _covers(pins: dict[str, str], reqs: list[Requirement], name: str) -> None:
    for req in reqs:
        assert _norm(req.name) in pins, f"{req.name} is not in {name}: bash requirements/lock.sh"
        assert req.specifier.contains(pins[_norm(req.name)], prereleases=True), (
            f"{name} pins {req.name}=={pins[_norm(req.name)]}, pyproject.toml asks {req.specifier}")


def test_the_cpu_lock_covers_every_dependency_at_an_allowed_version() -> None:
    pins = _lock()
    _covers(pins, [r for r in _requirements(_setup_extras()) if _norm(r.name) != "torch"], LOCK.name)
    assert pins["megatron-core"] == "0.16.1"  # 0.17+ needs Python 3.12: the locks keep both on the tested version
    # torch and its CUDA wheels: the Makefile installs the CPU torch of the `cpu` extra; GPU nodes keep their own
    assert "snakemake-executor-plugin-slurm" not in pins and "torch" not in pins
    assert not [n for n in pins if n.startswith(("nvidia-cu", "cuda-", "triton"))]


def _records_packages() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for run_json in (ROOT / "results" / "reference").rglob("run.json"):
        for name, version in ((json.loads(run_json.read_text()).get("provenance") or {}).get("packages")
                              or {}).items():
            if version:
                out.setdefault(_norm(name), set()).add(version.split("+")[0])
    return out


def test_the_gpu_lock_is_the_environment_of_the_committed_records() -> None:
    """Python 3.12 and every package version a record names (torch 2.11.0: CUDA 13 on PyPI), hash-checked."""
    pins = _lock(GPU_LOCK)
    _covers(pins, _requirements(GPU_EXTRAS), GPU_LOCK.name)
    measured = _records_packages()
    assert measured["python"] == {"3.12.3"} and measured["torch"] == {"2.11.0"}
    for name, versions in measured.items():
        if name not in ("python", "calorimeter"):
            assert versions == {pins[name]}, f"records name {name} {versions}, {GPU_LOCK.name} pins {pins[name]}"
    assert pins["nvidia-nccl-cu13"] and pins["cuda-toolkit"].startswith("13.")
    inputs = dict(line.split("==") for line in (ROOT / "requirements" / "gpu-py312.in").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert {_norm(k): v for k, v in inputs.items()} == {k: pins[k] for k in map(_norm, inputs)}


def test_make_setup_installs_the_lock_hash_checked_and_says_what_it_does() -> None:
    make = (ROOT / "Makefile").read_text()
    assert "LOCK ?= requirements/lock-cpu-py311.txt" in make and "--require-hashes -r $(LOCK)" in make
    assert {"test", "hf"} <= set(_setup_extras()) and "slurm" not in _setup_extras()
    setup = make[make.index("$(BIN)/.installed:"):make.index("\nrun:")]
    assert setup.count("$(call step,") >= 5  # a line per step, with the seconds since the start
    locked = next(line for line in setup.splitlines() if "$(LOCK_INSTALL)" in line)
    assert " -q " not in locked  # the long step shows pip's lines: each package it collects and installs


def test_the_container_recipes_install_the_gpu_lock() -> None:
    """container/Dockerfile and container/calorimeter.def: the records' Python, the GPU lock hash-checked, the
    checkout's code first; every file they copy exists and passes the Docker build context (.dockerignore)."""
    docker = (ROOT / "container" / "Dockerfile").read_text()
    apptainer = (ROOT / "container" / "calorimeter.def").read_text()
    python = next(iter(_records_packages()["python"]))
    assert f"FROM python:{python}-slim" in docker and f"From: python:{python}-slim" in apptainer
    for recipe in (docker, apptainer):
        assert "--require-hashes --no-deps -r /opt/lock/lock-gpu-py312.txt" in recipe and "pip check" in recipe
        assert "PYTHONPATH=" in recipe and "git" in recipe
    copied = re.findall(r"^COPY (.+) \S+$", docker, re.M)
    sources = [p for line in copied for p in line.split()] + re.findall(r"^    (\S+) /opt/\S+$", apptainer, re.M)
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for src in sources:
        assert (ROOT / src).exists(), src
        assert f"!{src.rstrip('/')}" in {line.rstrip("/") for line in ignore}, f"{src} is left out of the context"


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
    installs torch's pin, the lock hash-checked and the checkout, from the checkout, and refuses elsewhere."""
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert [e.name for e in envs] == ["calorimeter.yaml"]
    doc = yaml.safe_load(envs[0].read_text())
    assert doc["dependencies"] == ["python=3.11", "pip"]
    rules = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert set(re.findall(r'conda:\s*"([^"]+)"', rules)) == {"../../envs/calorimeter.yaml"}

    r, calls = _post_deploy(ROOT, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    cpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cpu"]
    assert calls[0][:3] == ["-m", "pip", "install"] and cpu[0] in calls[0]
    locked = calls[1]
    assert "--require-hashes" in locked and "--no-deps" in locked
    assert (ROOT / locked[locked.index("-r") + 1]).resolve() == LOCK  # relative to the checkout, where it runs
    install = calls[2]
    assert "--no-deps" in install
    assert install[install.index("-e") + 1] == f".[{','.join(_setup_extras())}]".replace("test,", "")

    r, calls = _post_deploy(ROOT, tmp_path / "b", CALORIMETER_TORCH_SPEC="")  # a GPU node keeps its own torch
    assert r.returncode == 0 and len(calls) == 2 and "-e" in calls[1]

    r, calls = _post_deploy(tmp_path, tmp_path / "c")  # snakemake run from elsewhere: refused, nothing installed
    assert r.returncode == 1 and "run snakemake from the calorimeter checkout" in r.stderr and calls == []
