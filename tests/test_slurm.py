"""calorimeter on a real SLURM cluster: `snakemake --profile profiles/slurm` end to end, typed as a cluster user types
it.

A session fixture starts a two-node SLURM 22.05 on this host (munge, MariaDB + slurmdbd for sacct, slurmctld, one
slurmd per node in its own UTS + mount namespace, 4 fake GPUs per node; tests/slurm/up.sh, installing Debian's
packages if missing) and stops it by PID afterwards (tests/slurm/down.sh). Nothing talks to anything but loopback.
An already running cluster is used as is and left running. The scenarios share one sweep that grows phase by phase,
so every rerun also proves that finished cells are left alone:

1. a small sweep through the profile; one of its cells run locally gives the same cell and status;
2. a job cancelled mid-run (scancel): the rerun submits only that cell;
3. a job hitting its time limit ends `failed (timeout)` once: never requeued (a cell restarts from scratch and
   would hit it again) nor resubmitted, its ranks' output in `calorimeter status`;
4. an injected OOM ends `oom` and is never resubmitted;
5. the Snakemake process killed mid-sweep: the rerun re-attaches to the running jobs, no duplicates (sacct);
6. finished cells' files keep their checksums through all of the above; a changed value reruns only its cell;
7. a second sweep runs 2x1 and 2x2 cells on two nodes: ranks placed node by node, one sampler per node, node and
   hostname columns in the tables;
8. a two-node job preempted (its ranks get USR2 early in the run, as at a preemption notice) is requeued with every
   setting of its task (telemetry included) and completes.
9. a node set DOWN while a two-node cell runs: SLURM fails the job (NODE_FAIL) and requeues it; the launcher waits
   for that one job in its attempt (Snakemake's retry never submits a second copy beside it); then the requeued
   run's rank on node2 is killed: srun ends the step, the record names rank 1 on node2 (peer_died) within 60 s,
   and Snakemake's retry (a second job, after the first ended) completes the cell although node1's slurmd (the
   batch host's) is killed while it runs (SLURM then holds the job COMPLETING; the launcher records it within a
   minute of the ranks' results).
10. a node lost for good (set DOWN, then drained, while a two-node cell runs): SLURM requeues the job, which waits
   for a node; after ``launcher.node_lost_wait_s`` the launcher cancels it and the cell is recorded `failed
   (node_lost)` naming node2, with the command that reruns it; nothing is resubmitted.

``calorimeter status`` and ``calorimeter rerun`` are checked inside scenarios 2 (running, then failed transient;
``rerun --failed -- --profile profiles/slurm`` trains only that cell), 3 and 10 (failed, with each rank's output or
the lost node), 4 (``rerun --oom --dry-run``), 5 (jobs left by a
killed Snakemake), 6 (``rerun --cells --no-run`` keeps the record byte for byte in its attempt) and 7 (rank 0's
progress file on a two-node cell), so that they add no cell of their own.

Scenarios 1 and 2 build everything the sweep makes (tables, figures, findings) through the profile; the later ones
ask Snakemake for what they check (a cell's record, the runs table), so that the cluster's time goes to scheduling.

Skipped (with the reason) only where SLURM cannot be set up at all (not root, no apt-get); with CI=true it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli, subprocess_env

from calorimeter.plan.plan import plan_file
from calorimeter.records.paths import THERMAL_PROFILE_JSON, SweepPaths
from calorimeter.records.provenance import cpu_model

# The scenarios share one local cluster and build on each other: `make test`'s pytest-xdist workers run one test file
# per worker (--dist loadfile), so they run in this order on one worker. Keep them in this one file.
pytestmark = [pytest.mark.slurm, pytest.mark.integration]

SLURM_DIR = os.environ.get("CALORIMETER_SLURM_DIR", "/tmp/calorimeter-slurm")
#: the project's SLURM profile, by its path (the bare name `slurm` is a site's own profile)
PROFILE = "profiles/slurm"
TIMINGS: dict[str, float] = {}

# One block per cell, so that each cell can be picked (and changed) on its own.
CELLS = {
    "A": {"model": "tiny-gpt", "gpus_per_node": 1, "zero_stage": 0},
    "B": {"model": "tiny-llama", "gpus_per_node": 1, "zero_stage": 0},
    "C": {"model": "tiny-gpt", "gpus_per_node": 2, "zero_stage": 1},      # two ranks, one job with 2 tasks
    "D": {"model": "tiny-llama", "gpus_per_node": 1, "zero_stage": 1},    # cancelled mid-run
    "E": {"model": "tiny-gpt", "gpus_per_node": 1, "zero_stage": 1},      # injected OOM
    "F": {"model": "tiny-gpt", "gpus_per_node": 1, "zero_stage": 0, "micro_batch": 2},   # hits its time limit
    "G": {"model": "tiny-llama", "gpus_per_node": 1, "zero_stage": 0, "micro_batch": 2},  # Snakemake killed
    "H": {"model": "tiny-gpt", "gpus_per_node": 1, "zero_stage": 0, "seq_len": 16},      # Snakemake killed
    # two nodes (the multi-node sweep)
    "M": {"model": "tiny-gpt", "nodes": 2, "gpus_per_node": 1, "zero_stage": 1},                      # 2x1
    "N": {"model": "tiny-llama", "nodes": 2, "gpus_per_node": 2, "zero_stage": 1, "global_batch": 4},  # 2x2
    "R": {"model": "tiny-gpt", "nodes": 2, "gpus_per_node": 1, "zero_stage": 0},  # 2 nodes, preempted
    "L": {"model": "tiny-gpt", "nodes": 2, "gpus_per_node": 1, "zero_stage": 0, "seq_len": 24},  # node set DOWN
    "K": {"model": "tiny-gpt", "nodes": 2, "gpus_per_node": 1, "zero_stage": 0, "seq_len": 40},  # node lost for good
}
DEFAULTS = {"global_batch": 2, "micro_batch": 1, "warmup_steps": 1, "measured_steps": 2, "seq_len": 32, "lr": 0.003}


# ---------------------------------------------------------------------------------------------------------------
# the cluster


def _cannot_run_slurm() -> str | None:
    """Why this machine cannot run the local SLURM cluster, or None."""
    if sys.platform != "linux":
        return f"SLURM tests need Linux (this is {sys.platform})"
    installed = all(shutil.which(x) for x in ("slurmctld", "slurmd", "sbatch", "munged", "slurmdbd", "mariadbd"))
    if os.geteuid() != 0:
        return "SLURM tests need root (to start munge, MariaDB, slurmdbd, slurmctld and slurmd)"
    if not installed and not shutil.which("apt-get"):
        return "SLURM is not installed and there is no apt-get to install Debian's slurm-wlm"
    return None


def _cluster_up() -> bool:
    ok = lambda *c: subprocess.run(c, capture_output=True, timeout=20).returncode == 0  # noqa: E731
    try:
        return bool(shutil.which("scontrol")) and ok("scontrol", "ping") and ok("sacct", "-n", "-X", "-S", "now")
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-node SLURM cluster with accounting; started (and stopped) here unless one is already up."""
    reason = _cannot_run_slurm()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the SLURM tests, but: {reason}")
        print(f"\nSKIP SLURM tests: {reason}", file=sys.stderr)
        pytest.skip(reason)
    started = False
    if not _cluster_up():
        t0 = time.time()
        r = subprocess.run(["bash", str(ROOT / "tests" / "slurm" / "up.sh")], capture_output=True, text=True,
                           timeout=900, env={**os.environ, "CALORIMETER_SLURM_DIR": SLURM_DIR})
        assert r.returncode == 0, f"tests/slurm/up.sh failed:\n{r.stdout[-3000:]}\n{r.stderr[-8000:]}"
        started = True
        TIMINGS["cluster up"] = time.time() - t0
    yield
    if started:
        subprocess.run(["bash", str(ROOT / "tests" / "slurm" / "down.sh")], capture_output=True, timeout=120,
                       env={**os.environ, "CALORIMETER_SLURM_DIR": SLURM_DIR})
    print("\nSLURM scenario timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()), file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------------
# helpers


class Sweep:
    """One growing sweep in a temporary results folder, run through the SLURM profile."""

    def __init__(self, tmp: Path, name: str = "slurmtest") -> None:
        self.tmp = tmp
        self.results = tmp / "results"
        self.name = f"{name}{os.getpid()}"
        self.t_start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 2))
        self.ids: dict[str, str] = {}
        self.checksums: dict[str, dict[str, str]] = {}

    def write(self, letters: str, launcher: dict | None = None, changed: dict | None = None,
              telemetry: dict | None = None) -> Path:
        """The sweep file with the cells named by ``letters``.

        These scenarios test scheduling: the node sampler runs, but no profiled step is added (its trace export
        costs seconds on CPU ranks), and scenario 3 turns the sampler off so that the requeued run surely ends
        before SLURM's next time-limit check.
        """
        cfg = {"sweep": self.name, "hardware": "cpu", "results_dir": str(self.results),
               "telemetry": {"profile_steps": 0, **(telemetry or {})},
               # the one-node test cluster runs several cells at once: not the measurement default of whole nodes
               "launcher": {"executor": "local", "timeout_min": 15, "poll_s": 2, "slurm": {"exclusive": False},
                            **(launcher or {})},
               "defaults": DEFAULTS,
               "grid": [{**CELLS[x], **((changed or {}).get(x, {}))} for x in letters]}
        path = self.tmp / f"sweep-{letters}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        for x, pc in zip(letters, plan_file(path).cells, strict=True):
            assert pc.status == "planned", pc.reasons
            self.ids.setdefault(x, pc.cell.cell_id)
        return path

    def cell_dir(self, x: str) -> Path:
        return self.results / self.name / "cells" / self.ids[x]

    def record_path(self, x: str) -> str:
        """Cell ``x``'s run.json: as a Snakemake target, that cell's record only (no tables, no figures)."""
        return str(self.cell_dir(x) / "run.json")

    def record(self, x: str) -> dict:
        return json.loads(Path(self.record_path(x)).read_text())

    def latest_attempt_record(self, x: str) -> dict:
        attempt = sorted((self.cell_dir(x) / "attempts").iterdir())[-1]
        return json.loads((attempt / "run.json").read_text())

    def jobs(self) -> Counter:
        """How many SLURM jobs each cell has had since the sweep began (sacct; requeues are the same job)."""
        names = {v: k for k, v in self.ids.items()}
        for _ in range(20):
            out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", self.t_start, "--format=JobID,JobName%300"],
                                 capture_output=True, text=True, check=True).stdout
            seen = {tuple(line.split("|", 1)) for line in out.splitlines() if "|" in line}
            count = Counter(names[n] for _, n in seen if n in names)
            if sum(count.values()) >= sum(1 for x in self.ids if self.cell_dir(x).joinpath("attempts").is_dir()):
                return count
            time.sleep(0.5)  # accounting lags a moment behind sbatch
        return count

    def snapshot(self, letters: str) -> None:
        """Remember the checksum of every file of these finished cells."""
        for x in letters:
            self.checksums[x] = _checksums(self.cell_dir(x))

    def assert_unchanged(self) -> None:
        """Every file of a finished cell as it was; the only files a later run may add are those rules derive from
        the cell's record, where the run that finished the cell asked only for the record or was stopped by a failed
        cell: its tables (rule cell_tables) and the host profile (rule thermal_profile)."""
        for x, before in self.checksums.items():
            now = _checksums(self.cell_dir(x))
            added = {k for k in now if k not in before}
            derived = {k for k in added if k == THERMAL_PROFILE_JSON or k.startswith("cell_tables/")}
            assert {k: now.get(k) for k in before} == before, f"finished cell {x} ({self.ids[x]}) was modified"
            assert added == derived, f"finished cell {x} ({self.ids[x]}) got {sorted(added - derived)}"


def _checksums(d: Path) -> dict[str, str]:
    out = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def snakemake(*args: str, faults: str | None = None, profile: bool = True, timeout: float = 900
              ) -> subprocess.CompletedProcess:
    """``snakemake --profile profiles/slurm ...`` from the repository root, exactly as a cluster user types it."""
    prof = ["--profile", PROFILE] if profile else []
    return subprocess.run([sys.executable, "-m", "snakemake", *prof, *args], cwd=ROOT, env=subprocess_env(faults),
                          capture_output=True, text=True, timeout=timeout)


def snakemake_bg(log: Path, *args: str, faults: str | None = None) -> subprocess.Popen:
    """Snakemake in its own session (so that it and its job scripts can be killed together, like a lost login)."""
    with log.open("w") as fh:
        return subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", PROFILE, *args], cwd=ROOT,
                                env=subprocess_env(faults), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def planned_trains(r: subprocess.CompletedProcess) -> set[str]:
    """Cell ids a dry run would train."""
    return set(re.findall(r"^Job \d+: train (\S+)", r.stdout + r.stderr, re.M))


def wait_for_jobs(s: Sweep, letters: str, states: set[str], timeout: float = 300,
                  proc: subprocess.Popen | None = None, log: Path | None = None) -> dict[str, str]:
    """Job ids of these cells once each one's job is in one of ``states`` (squeue). With the Snakemake process
    ``proc`` (and its ``log``), fails at once, with the log's end, when Snakemake ended before that."""
    tail = lambda: log.read_text()[-4000:] if log is not None and log.is_file() else ""  # noqa: E731
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"snakemake ended (exit {proc.returncode}) before the jobs of {letters} were in "
                                 f"{states}:\n{tail()}")
        ids = {}
        for x in letters:
            for job in sorted(s.cell_dir(x).glob("attempts/*/job.json")):
                jid = json.loads(job.read_text())["job_id"]
                st = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T"], capture_output=True, text=True).stdout
                if st.strip() in states:
                    ids[x] = jid
        if len(ids) == len(letters):
            return ids
        time.sleep(0.5)
    raise AssertionError(f"jobs of {letters} not in {states} after {timeout} s\n{_where(s, letters)}\n"
                         f"snakemake's log ends:\n{tail()}")


def _where(s: Sweep, letters: str) -> str:
    """Where each cell's submission stands, for a scenario that waited in vain: its attempts (an attempt without
    job.json: submission under way, sbatch not answered), its train log's end (the script started? submitted?), and
    the queue."""
    out = []
    for x in letters:
        atts = sorted(p.name + ("" if (p / "job.json").exists() else " (no job.json)")
                      for p in s.cell_dir(x).glob("attempts/*"))
        train_log = SweepPaths.of(s.results, s.name).log(f"train/{s.ids[x]}")
        log_end = train_log.read_text()[-1500:] if train_log.is_file() else "(no train log: the job never started)"
        out.append(f"cell {x} ({s.ids[x]}): attempts {atts or 'none'}; train log:\n{log_end}")
    queue = subprocess.run(["squeue", "-o", "%i %j %T %r"], capture_output=True, text=True, timeout=30)
    return "\n".join(out) + f"\nsqueue:\n{queue.stdout}{queue.stderr}"


def status(cfg: Path) -> dict[str, dict]:
    """``calorimeter status <sweep> --json``: cell id -> its status."""
    r = run_cli("status", str(cfg), "--json")
    assert r.returncode == 0, ok(r)
    return {c["cell_id"]: c for c in json.loads(r.stdout)["cells"]}


def ok(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-6000:]}"


@pytest.fixture(scope="module")
def sweep(slurm_cluster, tmp_path_factory) -> Sweep:
    s = Sweep(tmp_path_factory.mktemp("slurm"))
    yield s
    # a killed Snakemake leaves its lock behind if a scenario failed half-way
    snakemake("--configfile", str(s.write("ABCDEFGH")), "--unlock")


# ---------------------------------------------------------------------------------------------------------------
# scenarios (in order: each phase grows the same sweep)


def test_1_sweep_through_the_profile_matches_a_local_run(sweep: Sweep) -> None:
    t0 = time.time()
    cfg = sweep.write("ABC")
    r = snakemake("--configfile", str(cfg), timeout=900)
    assert r.returncode == 0, ok(r)
    TIMINGS["1 sweep (3 cells)"] = time.time() - t0
    for x in "ABC":
        rec = sweep.record(x)
        assert rec["status"] == "ok" and rec["failure_class"] == "ok", rec["reason"]
        launch = rec["provenance"]["launcher"]
        assert launch["executor"] == "slurm" and launch["job_id"]
        assert rec["evidence"]["slurm"]["state"] == "COMPLETED"
        assert (sweep.cell_dir(x) / "latest" / "submitit").is_dir()  # submitit's logs, linked from the cell
    # the job had the cell's shape: job name = cell id, one task per rank
    c = sweep.record("C")["evidence"]["slurm"]
    assert c["history"][0]["JobName"] == sweep.ids["C"]
    assert sorted(s["JobID"] for s in c["steps"] if s["JobID"].endswith(".0")) == [f"{c['job_id']}.0"]
    script = next((sweep.cell_dir("C") / "latest" / "submitit").glob("*_submission.sh")).read_text()
    assert "--ntasks-per-node=2" in script and f"--job-name={sweep.ids['C']}" in script
    assert sweep.jobs() == Counter({"A": 1, "B": 1, "C": 1})
    # the same sweep with the local executor (no profile): one of its cells trained locally (the local path end to
    # end is test_workflow's default sweep) gives the same cell and status, recorded as a local run
    t0 = time.time()
    local = sweep.tmp / "local"
    a_local = local / sweep.name / "cells" / sweep.ids["A"] / "run.json"
    r = snakemake(str(a_local), "--configfile", str(cfg), "--config", f"results_dir={local}", profile=False,
                  timeout=900)
    assert r.returncode == 0, ok(r)
    TIMINGS["1 local run (cell A)"] = time.time() - t0
    rec_local, rec_slurm = json.loads(a_local.read_text()), sweep.record("A")
    assert rec_local["status"] == rec_slurm["status"] == "ok" and rec_local["cell"] == rec_slurm["cell"]
    assert rec_local["provenance"]["launcher"]["executor"] == "local"
    # both name the host's processor (a host-bound cell's speed is the host's): every rank, and the record
    for rec in (rec_local, rec_slurm):
        assert rec["provenance"]["host_cpus"] == [cpu_model()] and cpu_model()
        assert all(r["host_cpu"]["model"] == cpu_model() and r["host_cpu"]["usable_cpus"] >= 1
                   and r["host_cpu"]["dispatch_us_per_op"] > 0 for r in rec["provenance"]["ranks"])
    sweep.snapshot("ABC")


def test_2_cancelled_job_then_rerun_submits_only_that_cell(sweep: Sweep) -> None:
    t0 = time.time()
    cfg = sweep.write("ABCDE")
    proc = snakemake_bg(sweep.tmp / "phase2.log", "--configfile", str(cfg), "--retries", "0",
                        faults=f"{sweep.ids['D']}=sleep:600,{sweep.ids['E']}=oom")
    try:
        jid = wait_for_jobs(sweep, "D", {"RUNNING"}, proc=proc, log=sweep.tmp / "phase2.log")["D"]
        time.sleep(3)  # mid-run: the ranks are up and sleeping
        d = status(cfg)[sweep.ids["D"]]  # calorimeter status while Snakemake runs: SLURM's view of the open job
        assert (d["state"], d["job_id"], d["attempts"]) == ("running", jid, 1), d
        assert d["note"].startswith("SLURM RUNNING on node"), d
        subprocess.run(["scancel", jid], check=True)
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (sweep.tmp / "phase2.log").read_text()
    assert rc != 0, log[-4000:]  # the cancelled cell fails its rule
    assert not (sweep.cell_dir("D") / "run.json").exists()
    rec = sweep.latest_attempt_record("D")
    assert rec["status"] == "transient" and rec["failure_class"] == "transient", rec["reason"]
    assert rec["evidence"]["slurm"]["state"] == "CANCELLED" and "CANCELLED" in rec["reason"]
    st = status(cfg)
    assert {x: (st[sweep.ids[x]]["state"], st[sweep.ids[x]]["failure_class"]) for x in "ABCDE"} == {
        **{x: ("ok", "ok") for x in "ABC"}, "D": ("failed", "transient"), "E": ("oom", "oom")}, st
    assert st[sweep.ids["D"]]["job_id"] == jid
    print("\n" + run_cli("status", str(cfg)).stdout)  # the table, for the record of a run with -s
    sweep.assert_unchanged()
    # the rerun would train D only (E ended oom, A-C are done)
    r = snakemake("--configfile", str(cfg), "-n")
    assert r.returncode == 0, ok(r)
    assert planned_trains(r) == {sweep.ids["D"]}, ok(r)
    # ... and `calorimeter rerun --failed` through the profile trains it (then the tables and figures)
    r = run_cli("rerun", str(cfg), "--failed", "--", "--profile", PROFILE, timeout=900)
    assert r.returncode == 0, ok(r)
    assert planned_trains(r) == {sweep.ids["D"]} and f"  {sweep.ids['D']}  failed (transient)" in r.stdout, ok(r)
    assert sweep.record("D")["status"] == "ok"
    assert len(list((sweep.cell_dir("D") / "attempts").iterdir())) == 2  # the cancelled attempt is kept
    assert sweep.jobs() == Counter({"A": 1, "B": 1, "C": 1, "D": 2, "E": 1})
    TIMINGS["2 cancel + rerun"] = time.time() - t0
    sweep.assert_unchanged()
    sweep.snapshot("D")


def test_4_injected_oom_is_recorded_and_never_resubmitted(sweep: Sweep) -> None:
    rec = sweep.record("E")
    assert rec["status"] == "oom" and rec["failure_class"] == "oom", rec
    assert "injected" in rec["reason"]
    assert rec["evidence"]["slurm"]["state"] in ("FAILED", "COMPLETED")
    cfg = sweep.write("ABCDE")
    r = snakemake("--configfile", str(cfg), "-n")
    assert r.returncode == 0 and planned_trains(r) == set(), ok(r)
    # the OOM cell is what `calorimeter rerun --oom` would run, and only it
    r = run_cli("rerun", str(cfg), "--oom", "--dry-run", "--", "--profile", PROFILE)
    assert r.returncode == 0, ok(r)
    assert re.findall(r"^  (\S+)  oom", r.stdout, re.M) == [sweep.ids["E"]], ok(r)
    assert "snakemake " + str(sweep.cell_dir("E") / "run.json") in r.stdout and f"--profile {PROFILE}" in r.stdout
    assert sweep.jobs()["E"] == 1
    sweep.snapshot("E")


def test_3_time_limit_ends_the_cell_failed_once_with_its_output(sweep: Sweep) -> None:
    t0 = time.time()
    # A 2-minute limit with USR2 10 s before it; the cell never reaches its first step. A cell restarts from scratch,
    # so a time limit is not requeued (it would be hit again): rank 0 records the time-out, the cell is failed
    # (timeout) in one job and one run, and never resubmitted.
    cfg = sweep.write("ABCDEF", launcher={"timeout_min": 2, "signal_delay_s": 10}, telemetry={"enabled": False})
    r = snakemake(sweep.record_path("F"), "--configfile", str(cfg), faults=f"{sweep.ids['F']}=sleep:600", timeout=900)
    assert r.returncode == 0, ok(r)  # a deterministic failure is a record: the rule succeeds
    TIMINGS["3 time limit, failed once"] = time.time() - t0
    rec = sweep.record("F")
    assert (rec["status"], rec["failure_class"]) == ("failed", "timeout"), rec["reason"]
    assert rec["reason"].startswith("rank 0: time limit of 2 min reached after "), rec["reason"]
    slurm = rec["evidence"]["slurm"]
    assert slurm["runs"] == 1 and rec["provenance"]["launcher"]["requeues"] == 0, slurm["history"]
    assert [(e["why"], e["requeued"]) for e in rec["evidence"]["requeues"]] == [("time limit", False)]
    assert sweep.jobs()["F"] == 1
    # every rank's output, in the record and in `calorimeter status`: the sleeping rank says what it does
    st = status(cfg)[sweep.ids["F"]]
    assert (st["state"], st["failure_class"]) == ("failed", "timeout"), st
    assert any("sleeps 600 s" in line for o in st["rank_output"] for line in o["stdout"]), st["rank_output"]
    assert "rank 0 on node" in run_cli("status", str(cfg)).stdout
    r = snakemake("--configfile", str(cfg), "-n")
    assert r.returncode == 0 and planned_trains(r) == set(), ok(r)  # never resubmitted
    sweep.assert_unchanged()
    sweep.snapshot("F")


def test_5_killed_snakemake_reattaches_without_duplicates(sweep: Sweep) -> None:
    t0 = time.time()
    cfg = sweep.write("ABCDEFGH")
    faults = f"{sweep.ids['G']}=sleep:20,{sweep.ids['H']}=sleep:20"
    proc = snakemake_bg(sweep.tmp / "phase5.log", "--configfile", str(cfg), faults=faults)
    try:
        jobs = wait_for_jobs(sweep, "GH", {"RUNNING", "PENDING"}, proc=proc, log=sweep.tmp / "phase5.log")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and its job scripts die; the SLURM jobs do not
        proc.wait(timeout=30)
    for jid in jobs.values():
        st = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        assert st in ("RUNNING", "PENDING", "COMPLETING"), st
    # calorimeter status after Snakemake died: the jobs, from the cell folders and SLURM
    st = status(cfg)
    for x in "GH":
        c = st[sweep.ids[x]]
        assert c["state"] in ("running", "queued") and c["job_id"] == jobs[x], c
    assert all(st[sweep.ids[x]]["state"] == "ok" for x in "ABCD") and st[sweep.ids["F"]]["state"] == "failed"
    r = snakemake("--configfile", str(cfg), "--unlock")
    assert r.returncode == 0, ok(r)
    r = snakemake(sweep.record_path("G"), sweep.record_path("H"), "--configfile", str(cfg), faults=faults)
    assert r.returncode == 0, ok(r)
    TIMINGS["5 kill + re-attach"] = time.time() - t0
    logs = r.stdout + r.stderr
    for x in "GH":
        assert f"re-attaching to job {jobs[x]}" in logs, logs[-4000:]
        rec = sweep.record(x)
        assert rec["status"] == "ok" and rec["provenance"]["launcher"]["reattached"], rec["reason"]
        assert rec["provenance"]["launcher"]["job_id"] == jobs[x]
        assert len(list((sweep.cell_dir(x) / "attempts").iterdir())) == 1
    assert sweep.jobs() == Counter({"A": 1, "B": 1, "C": 1, "D": 2, "E": 1, "F": 1, "G": 1, "H": 1})
    sweep.assert_unchanged()
    sweep.snapshot("GH")


def test_6_finished_cells_keep_their_files_and_a_changed_value_reruns_only_its_cell(sweep: Sweep) -> None:
    cfg = sweep.write("ABCDEFGH")
    r = snakemake("--configfile", str(cfg), "-n")
    assert r.returncode == 0 and planned_trains(r) == set(), ok(r)
    changed = sweep.write("ABCDEFGH", changed={"B": {"lr": 0.001}})
    r = snakemake("--configfile", str(changed), "-n")
    assert r.returncode == 0, ok(r)
    assert planned_trains(r) == {sweep.ids["B"]}, ok(r)
    sweep.assert_unchanged()
    assert set(sweep.checksums) == set("ABCDEFGH")
    # `calorimeter rerun --cells`: B's record moves into its attempt (every byte kept), and only B would run
    r = run_cli("rerun", str(cfg), "--cells", sweep.ids["B"], "--no-run", "--", "--profile", PROFILE)
    assert r.returncode == 0, ok(r)
    attempt = next((sweep.cell_dir("B") / "attempts").iterdir())
    now_cell, now_attempt = _checksums(sweep.cell_dir("B")), _checksums(attempt)
    for name, digest in sweep.checksums["B"].items():
        kept = now_cell if name.startswith(("attempts/", "latest")) else now_attempt  # the record: in its attempt
        assert kept.get(name) == digest, name
    assert not (sweep.cell_dir("B") / "run.json").exists()
    assert status(cfg)[sweep.ids["B"]]["state"] == "planned"
    r = snakemake("--configfile", str(cfg), "-n")
    assert r.returncode == 0 and planned_trains(r) == {sweep.ids["B"]}, ok(r)


# ---------------------------------------------------------------------------------------------------------------
# two nodes (a second sweep of its own)


@pytest.fixture(scope="module")
def multinode(slurm_cluster, tmp_path_factory) -> Sweep:
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    assert len(set(nodes)) >= 2, f"the test cluster has nodes {nodes}: run tests/slurm/up.sh (two nodes)"
    s = Sweep(tmp_path_factory.mktemp("slurm-2n"), name="slurm2n")
    yield s
    snakemake("--configfile", str(s.write("MNR")), "--unlock")


def _placement(rec: dict) -> list[tuple[int, int, int, str]]:
    """(rank, node, local rank, hostname) of every rank of a record, by rank."""
    return sorted((r["rank"], r["node"], r["local_rank"], r["hostname"]) for r in rec["provenance"]["ranks"])


def test_7_two_node_cells_place_ranks_node_by_node_with_one_sampler_per_node(multinode: Sweep) -> None:
    import pandas as pd

    t0 = time.time()
    cfg = multinode.write("MN", telemetry={"period_ms": 100})
    r = snakemake(str(SweepPaths.of(multinode.results, multinode.name).table("runs")), "--configfile", str(cfg))
    assert r.returncode == 0, ok(r)
    TIMINGS["7 two-node sweep (2x1, 2x2)"] = time.time() - t0
    for x, gpn in (("M", 1), ("N", 2)):
        rec = multinode.record(x)
        assert rec["status"] == "ok", rec["reason"]
        slurm = rec["evidence"]["slurm"]
        assert slurm["state"] == "COMPLETED" and slurm["nodelist"] == "node[1-2]", slurm
        # SLURM's block distribution: ranks 0..gpn-1 on the first node, the next gpn on the second
        assert _placement(rec) == [(k, k // gpn, k % gpn, f"node{k // gpn + 1}") for k in range(2 * gpn)], rec
        assert rec["provenance"]["hosts"] == ["node1", "node2"]
        assert {r["backend"] for r in rec["provenance"]["ranks"]} == {"gloo"}
        script = next((multinode.cell_dir(x) / "latest" / "submitit").glob("*_submission.sh")).read_text()
        assert "--nodes=2" in script and f"--ntasks-per-node={gpn}" in script
        # one node sampler per node, started by each node's local rank 0, with the sweep's period
        meta = json.loads((multinode.cell_dir(x) / "telemetry.json").read_text())
        assert sorted(meta) == ["node0", "node1"], meta
        assert all(meta[n]["sampler"]["period_s"] == pytest.approx(0.1) for n in meta), meta
        host = pd.read_parquet(multinode.cell_dir(x) / "host_telemetry.parquet")
        assert host.groupby("node")["hostname"].unique().map(list).to_dict() == {0: ["node1"], 1: ["node2"]}
        staging = multinode.cell_dir(x) / "latest" / "staging" / "restart0" / "telemetry"
        assert sorted(p.name for p in staging.iterdir()) == ["node0", "node1"]
        # the cell's tables carry the placement: one steps row per rank and step, every rank present
        steps = pd.read_parquet(multinode.cell_dir(x) / "cell_tables" / "steps.parquet")
        assert sorted(steps["rank"].unique()) == list(range(2 * gpn))
        # rank 0 (on node1) wrote the progress file, one line per step
        progress = (staging.parent / "progress.jsonl").read_text().splitlines()
        assert len(progress) == 1 + DEFAULTS["warmup_steps"] + DEFAULTS["measured_steps"], progress
    runs = pd.read_parquet(multinode.results / multinode.name / "tables" / "runs.parquet").set_index("cell_id")
    assert (runs.loc[[multinode.ids["M"], multinode.ids["N"]], "status"] == "ok").all()
    assert {c["state"] for c in status(cfg).values()} == {"ok"}
    assert multinode.jobs() == Counter({"M": 1, "N": 1})
    multinode.snapshot("MN")


def test_8_two_node_preemption_requeues_keeping_every_setting_and_completes(multinode: Sweep) -> None:
    import pickle

    t0 = time.time()
    # A preemption notice (USR2 to the job's ranks, early in the run): rank 0 checkpoints and the same job is
    # requeued. The telemetry block differs from the defaults in every key, so that a requeued task rebuilt with
    # defaults would show. The ranks hold before training until the requeued run is up.
    telemetry = {"enabled": True, "period_ms": 250, "profile_steps": 0, "profile_all_ranks": True}
    hold = multinode.tmp / "hold-R"
    hold.write_text("")
    cfg = multinode.write("MNR", launcher={"max_requeues": 2}, telemetry=telemetry)
    proc = snakemake_bg(multinode.tmp / "phase8.log", multinode.record_path("R"), "--configfile", str(cfg),
                        faults=f"{multinode.ids['R']}=hold:{hold}")
    try:
        jid = wait_for_jobs(multinode, "R", {"RUNNING"}, proc=proc, log=multinode.tmp / "phase8.log")["R"]
        _until(lambda: len(_alive(multinode, "R", 0)) == 2, proc, multinode.tmp / "phase8.log")
        submitted = next((multinode.cell_dir("R") / "latest" / "submitit").glob("*_submitted.pkl"))
        original = submitted.read_bytes()  # submitit overwrites it with the requeued task at the checkpoint
        subprocess.run(["scancel", "--signal=USR2", jid], check=True)
        _until(lambda: len(_alive(multinode, "R", 1)) == 2, proc, multinode.tmp / "phase8.log")
        hold.unlink()
        rc = proc.wait(timeout=600)
    finally:
        hold.unlink(missing_ok=True)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = (multinode.tmp / "phase8.log").read_text()
    assert rc == 0, log[-6000:]
    TIMINGS["8 two-node preemption + requeue"] = time.time() - t0
    rec = multinode.record("R")
    assert rec["status"] == "ok", rec["reason"]
    slurm = rec["evidence"]["slurm"]
    assert slurm["runs"] >= 2 and slurm["history"][0]["State"] == "REQUEUED", slurm["history"]
    assert slurm["nodelist"] == "node[1-2]" and rec["provenance"]["hosts"] == ["node1", "node2"]
    assert multinode.jobs()["R"] == 1  # requeued, not resubmitted
    assert rec["evidence"]["rank_restart"] == {"0": slurm["runs"] - 1, "1": slurm["runs"] - 1}
    assert [(e["why"], e["requeued"]) for e in rec["evidence"]["requeues"]][0] == ("preemption", True)
    # every setting of the task survives the requeue: only the requeue count differs
    before = vars(pickle.loads(original).function)
    after = vars(pickle.loads(submitted.read_bytes()).function)
    assert after.pop("requeues") >= 1 and before.pop("requeues") == 0
    assert after == before
    # ... and took effect in the requeued run: both nodes sampled with the sweep's period
    meta = json.loads((multinode.cell_dir("R") / "telemetry.json").read_text())
    assert sorted(meta) == ["node0", "node1"]
    assert all(meta[n]["sampler"]["period_s"] == pytest.approx(0.25) for n in meta), meta
    assert all(e["max_requeues"] == 2 for e in rec["evidence"]["requeues"]), rec["evidence"]["requeues"]
    multinode.assert_unchanged()


def _alive(s: Sweep, x: str, restart: int) -> list[dict]:
    """The alive files of cell ``x``'s newest attempt written by run ``restart`` of its job."""
    staging = sorted(s.cell_dir(x).glob("attempts/*/staging"))
    found = [json.loads(f.read_text()) for f in sorted(staging[-1].glob("alive-*.json"))] if staging else []
    return [a for a in found if a.get("restart") == restart]


def _until(what, proc: subprocess.Popen, log: Path, limit_s: float = 180):
    """``what()`` once it is true; fails (with Snakemake's log) when Snakemake ended or after ``limit_s``."""
    deadline = time.time() + limit_s
    while not (got := what()):
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    return got


def test_9_node_down_then_a_nodes_rank_killed_one_copy_at_a_time(multinode: Sweep) -> None:
    t0 = time.time()
    hold = multinode.tmp / "hold-L"
    hold.write_text("")
    cfg = multinode.write("L")
    proc = snakemake_bg(multinode.tmp / "phase9.log", multinode.record_path("L"), "--configfile", str(cfg),
                        faults=f"{multinode.ids['L']}=hold:{hold}")
    staging = lambda: sorted(multinode.cell_dir("L").glob("attempts/*/staging"))  # noqa: E731
    log = multinode.tmp / "phase9.log"
    tail = lambda: log.read_text()[-3000:]  # noqa: E731

    def alive(restart: int) -> list[dict]:
        found = _alive(multinode, "L", restart)
        return found if len(found) == 2 else []

    def until(what, limit_s: float = 180):
        return _until(what, proc, log, limit_s)

    try:
        first = wait_for_jobs(multinode, "L", {"RUNNING"}, proc=proc, log=multinode.tmp / "phase9.log")["L"]
        until(lambda: alive(0))  # both ranks up, held before training
        t_down = time.time()
        # 1. node2 set DOWN: NODE_FAIL, SLURM requeues the job (ReturnToService=2 brings node2 back as its slurmd
        #    registers); the launcher waits for that same job in its attempt, Snakemake submits nothing beside it
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=calorimeter-test"], check=True)
        ranks = until(lambda: alive(1))
        requeued_s = time.time() - t_down
        assert len(staging()) == 1 and multinode.jobs()["L"] == 1
        # 2. node2's rank killed: srun --kill-on-bad-exit ends the step, the cell ends by class within the bound
        t_kill = time.time()
        os.kill(next(a["pid"] for a in ranks if a["host"] == "node2"), signal.SIGKILL)
        closed = until(lambda: [p for p in staging()[0].parent.glob("run.json")], 90)[0]
        ended_s = time.time() - t_kill
        rec = json.loads(closed.read_text())
        assert (rec["status"], rec["failure_class"]) == ("transient", "peer_died"), rec["reason"]
        assert rec["reason"].startswith("rank 1 on host node2 (pid "), rec["reason"]  # its heartbeat stopped first
        assert rec["evidence"]["slurm"]["history"][0]["State"] == "NODE_FAIL"
        assert ended_s < 60, ended_s
        # 3. Snakemake's retry (a second job, after the first ended); node1's slurmd killed while it runs: its
        #    ranks finish, SLURM holds the job COMPLETING (minutes: the node never reports), the launcher does not
        until(lambda: len(staging()) == 2 and alive(0))
        slurmd = int((Path(SLURM_DIR) / "run" / "slurmd-node1.pid").read_text())  # the batch host's
        os.kill(slurmd, signal.SIGKILL)  # killed, as a crashed daemon
        until(lambda: not Path(f"/proc/{slurmd}").exists(), 30)
        hold.unlink()
        rc = proc.wait(timeout=240)
        results_s = max(p.stat().st_mtime for p in staging()[-1].glob("rank-*.json"))
        completing_s = (multinode.cell_dir("L") / "run.json").stat().st_mtime - results_s
    finally:
        hold.unlink(missing_ok=True)
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=RESUME"], capture_output=True)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        up = subprocess.run(["bash", str(ROOT / "tests" / "slurm" / "up.sh")], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "CALORIMETER_SLURM_DIR": SLURM_DIR})  # the slurmd back
    assert rc == 0, tail()
    assert completing_s < 60, completing_s  # not SLURM's minutes of COMPLETING
    assert up.returncode == 0, up.stderr[-3000:]
    TIMINGS["9 node DOWN, rank killed, retry"] = time.time() - t0
    rec = multinode.record("L")
    assert rec["status"] == "ok", rec["reason"]
    assert rec["provenance"]["launcher"]["job_id"] != first and multinode.jobs()["L"] == 2
    runs = subprocess.run(["sacct", "-X", "-n", "-P", "-S", multinode.t_start, "--name", multinode.ids["L"],
                           "--format=JobID,Start,End"], capture_output=True, text=True, check=True).stdout
    spans = sorted(tuple(line.split("|")[1:]) for line in runs.splitlines() if line)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), spans  # never two copies at once
    attempts = staging()
    assert len(attempts) == 2 and not list(attempts[0].glob("rank-*.json")), attempts  # nothing misplaced
    print(f"\nnode DOWN: requeued run up {requeued_s:.0f} s after; node2's rank killed: cell ended (peer_died) "
          f"{ended_s:.1f} s after; the retry completed it with node1's slurmd killed, recorded {completing_s:.0f} s "
          "after its ranks' results")


def test_10_a_node_lost_for_good_ends_the_cell_failed_within_the_bound_naming_it(multinode: Sweep) -> None:
    t0 = time.time()
    hold = multinode.tmp / "hold-K"
    hold.write_text("")
    wait_s = 20
    cfg = multinode.write("K", launcher={"node_lost_wait_s": wait_s})
    log = multinode.tmp / "phase10.log"
    proc = snakemake_bg(log, multinode.record_path("K"), "--configfile", str(cfg),
                        faults=f"{multinode.ids['K']}=hold:{hold}")
    try:
        wait_for_jobs(multinode, "K", {"RUNNING"}, proc=proc, log=log)
        _until(lambda: len(_alive(multinode, "K", 0)) == 2, proc, log)  # both ranks up, held before training
        # node2 fails (DOWN: NODE_FAIL, SLURM requeues the job) and stays out (drained: it never takes the job again)
        t_lost = time.time()
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=calorimeter-test-lost"],
                       check=True)
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=calorimeter-test-lost"],
                       check=True)
        closed = _until(lambda: list(multinode.cell_dir("K").glob("run.json")), proc, log, wait_s + 120)[0]
        ended_s = closed.stat().st_mtime - t_lost
        rc = proc.wait(timeout=300)
    finally:
        hold.unlink(missing_ok=True)
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=RESUME"], capture_output=True)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 0, log.read_text()[-4000:]  # recorded: the rule succeeds, nothing is submitted again
    TIMINGS["10 node lost for good"] = time.time() - t0
    rec = multinode.record("K")
    assert (rec["status"], rec["failure_class"]) == ("failed", "node_lost"), rec["reason"]
    assert rec["reason"].startswith("node node2 (drain"), rec["reason"]
    assert f"calorimeter rerun {cfg} --failed" in rec["reason"], rec["reason"]
    lost = rec["evidence"]["launcher_cancelled"]["node_lost"]
    assert [n["node"] for n in lost["nodes"]] == ["node2"] and lost["waited_s"] >= wait_s, lost
    assert ended_s < wait_s + 60, ended_s  # the bound, plus SLURM's requeue and the record
    assert multinode.jobs()["K"] == 1
    st = status(cfg)[multinode.ids["K"]]
    assert (st["state"], st["failure_class"]) == ("failed", "node_lost") and "node2" in st["reason"], st
    print(f"\nnode lost for good: the cell ended failed (node_lost) {ended_s:.0f} s after node2 went DOWN "
          f"(bound {wait_s} s)")
