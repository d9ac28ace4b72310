"""Shared fixtures: repository paths and a runner for the CLI; the order in which the suite's files run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "config" / "sweeps"
#: seconds each test file took in a recent `make test` (2 cores), only to order the files: longest first
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
# the cost before running keeps projected steps in a cache (calorimeter.projection.cost): the tests', and their
# subprocesses', in a scratch folder of this run, never the user's
os.environ.setdefault("CALORIMETER_CACHE_DIR", tempfile.mkdtemp(prefix="calorimeter-test-cache-"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--write-file-seconds", action="store_true",
                     help=f"write each test file's seconds (setup, call and teardown) to {FILE_SECONDS.name}")


def _file_seconds() -> dict[str, float]:
    return json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest work first, each file kept whole and in its own order: the files with SLURM scenarios (mostly waiting
    on the cluster, so they start at once and overlap the rest), then every other file by its seconds in
    tests/file_seconds.json (a file not listed there: by its marks). Under ``make test`` (pytest-xdist,
    ``--dist loadfile``) the files are handed to the workers in this order (:func:`pytest_xdist_make_scheduler`),
    so that no long file starts last."""
    seconds = _file_seconds()
    key: dict[Path, tuple[int, float]] = {}
    for item in items:
        slurm, integration = item.get_closest_marker("slurm"), item.get_closest_marker("integration")
        guess = 60.0 if integration else 1.0
        k = (0 if slurm else 1, -seconds.get(item.path.name, guess))
        key[item.path] = min(key.get(item.path, k), k)
    items.sort(key=lambda item: key[item.path])  # a stable sort keeps each file's order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` in collection order (pytest-xdist would sort the files by their number of tests, which
    put the SLURM file, 10 tests and the longest, a third of the way in), one file ahead per worker: a worker is
    given its next file only when the last test of its current one starts."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class InOrder(LoadFileScheduling):
        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # a worker runs a test once it knows the next one (for teardown): its last test waits for the next file
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    config.option.loadscopereorder = False
    return InOrder(config, log)


_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SECONDS[report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("--write-file-seconds") and not hasattr(session.config, "workerinput"):
        merged = {**_file_seconds(), **{k: round(v, 1) for k, v in _SECONDS.items()}}
        FILE_SECONDS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


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
