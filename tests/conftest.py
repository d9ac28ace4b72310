"""Shared fixtures: repository paths and a runner for the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "config" / "sweeps"
# the cost before running keeps projected steps in a cache (calorimeter.projection.cost): the tests', and their
# subprocesses', in a scratch folder of this run, never the user's
os.environ.setdefault("CALORIMETER_CACHE_DIR", tempfile.mkdtemp(prefix="calorimeter-test-cache-"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest work first: files with SLURM scenarios, then files with integration tests, then the unit tests, each
    file kept whole and in its own order. Under ``make test`` (pytest-xdist, ``--dist loadfile``) the files are handed
    to workers in this order, so the SLURM file (the longest, mostly waiting on the cluster) starts at once instead of
    after most of the suite."""
    rank: dict[Path, int] = {}
    for item in items:
        r = 0 if item.get_closest_marker("slurm") else 1 if item.get_closest_marker("integration") else 2
        rank[item.path] = min(rank.get(item.path, 2), r)
    items.sort(key=lambda item: rank[item.path])  # a stable sort keeps each file's order


@pytest.fixture(autouse=True)
def _close_open_figures():
    """A test that leaves a matplotlib figure open does not leak it into the next test's checks."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def root() -> Path:
    """Repository root."""
    return ROOT


def subprocess_env(faults: str | None = None) -> dict[str, str]:
    """The environment of a subprocess that runs this checkout's package, with the injected faults ``faults``
    (``CALORIMETER_TEST_FAULTS``, calorimeter.launch.faults) or none."""
    env = {k: v for k, v in os.environ.items() if k != "CALORIMETER_TEST_FAULTS"}
    env["PYTHONPATH"] = str(ROOT / "src")
    if faults:
        env["CALORIMETER_TEST_FAULTS"] = faults
    return env


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120, faults: str | None = None
            ) -> subprocess.CompletedProcess:
    """Run ``python -m calorimeter`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "calorimeter", *args], cwd=cwd or ROOT, env=subprocess_env(faults),
                          capture_output=True, text=True, timeout=timeout)
