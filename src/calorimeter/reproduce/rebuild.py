"""Rebuild a committed reference set without touching it: copy its records (run.json, Parquet, plan.json and the
committed tables, which the cross-sweep comparisons read) to a scratch results folder outside the tracked files
(``results/rebuild/<set>`` by default, ignored by git), then run ``snakemake figures`` there for each sweep, with the
``config/reference`` file that names it, with the scratch folder as Snakemake's working directory and results folder
(so the HTML report names every file relative to the results folder, never a machine's absolute path). Tables of any
age are read with today's columns, so the order of the sweeps does not change the findings
(:func:`calorimeter.records.legacy.upgrade_runs`)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from calorimeter.reproduce.sources import sweep_folders

#: what a rebuild writes anew and so does not copy
SKIP = ("figures", "logs", "cell_tables", "compare", "report*.html", "summary.*", "findings.html", ".snakemake")


def repo_root() -> Path:
    """The checkout holding the Snakefile (the workflow is run from there)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "Snakefile").is_file():
        raise FileNotFoundError(f"{root}: no Snakefile; run `calorimeter rebuild` from a calorimeter checkout")
    return root


def reference_configs(root: Path) -> dict[str, Path]:
    """sweep name -> the config/reference file that defines it."""
    out = {}
    for p in sorted((root / "config" / "reference").glob("*.yaml")):
        sweep = (yaml.safe_load(p.read_text()) or {}).get("sweep")
        if sweep:
            out.setdefault(str(sweep), p)
    return out


@dataclass(frozen=True)
class Step:
    """One sweep of a set to rebuild: its config and the command (None when no config names the sweep)."""

    sweep: str
    config: Path | None
    command: list[str] | None
    report: list[str] | None = None  # the HTML report, a second call once everything is built


def plan_rebuild(reference: Path, out: Path, cores: int = 2, report: bool = False) -> list[Step]:
    """The snakemake command of each sweep in ``reference`` (a set folder or one sweep folder)."""
    root = repo_root()
    configs = reference_configs(root)
    steps = []
    for sweep in sweep_folders(reference):
        cfg = configs.get(sweep.name)
        cmd = None
        if cfg is not None:  # run in the scratch folder: every path the report names is relative to it
            cmd = [sys.executable, "-m", "snakemake", "figures", "--snakefile", str(root / "Snakefile"),
                   "--directory", str(out), "--configfile", str(cfg), "--config", "results_dir=.",
                   "--cores", str(cores)]
        rep = [*cmd, "--report", str((out / sweep.name / "report.html").absolute())] if cmd and report else None
        steps.append(Step(sweep.name, cfg, cmd, rep))
    return steps


def copy_records(reference: Path, out: Path) -> None:
    """Copy the set's sweeps to ``out`` (what a rebuild writes anew is left behind)."""
    sweeps = sweep_folders(reference)
    for sweep in sweeps:
        dest = out / sweep.name
        if dest.exists():
            raise FileExistsError(f"{dest} exists: remove it or choose another --out (nothing is overwritten)")
    for sweep in sweeps:
        shutil.copytree(sweep, out / sweep.name, ignore=shutil.ignore_patterns(*SKIP))


def shown(cmd: list[str]) -> str:
    """A command as a user would type it (``python`` for this interpreter)."""
    return shlex.join(["python", *cmd[1:]]) if cmd and cmd[0] == sys.executable else shlex.join(cmd)


def run_rebuild(steps: list[Step]) -> int:
    """Run each step's command from the checkout; the first failure's exit status (0 when all succeed)."""
    root = repo_root()
    for st in steps:
        if st.command is None:
            print(f"{st.sweep}: no config/reference file names this sweep: not rebuilt")
            continue
        for cmd in (st.command, st.report):
            if cmd is None:
                continue
            print("$ " + shown(cmd), flush=True)
            rc = subprocess.run(cmd, cwd=root).returncode
            if rc:
                return rc
    return 0
