"""The run-to-run noise that ``calorimeter compare`` judges a difference against, per metric and regime, pooled over
the committed sets, with its own degrees of freedom. It is data (:data:`NOISE_FILE`), regenerated from every committed
sweep's tables by ``python -m calorimeter.reproduce.noise --write``; ``--check`` (and a test) fails when the file and
the committed sets disagree.

**Model.** A metric ``y`` of configuration ``k`` (on the log scale for throughput, power and energy, so that its
standard deviation is a fraction; in °C for temperatures), measured on machine ``m``: ``y = mu_k + b_km + e``, where
``b_km`` (variance ``sigma_machine**2``) is what the machine adds (its host, its cooling, its day) and ``e`` (variance
``sigma_repetition**2``) a repetition's own noise.

* ``sigma_repetition``: pooled within the groups of ok repetitions of one configuration in one sweep on one machine;
  its degrees of freedom are ``sum(n - 1)``.
* machine: for each configuration (same id, warm-up mode and engine fingerprint) measured on two machines or more, the
  spread of its machine means. Pooled (``machine_var``, on ``sum(J - 1)`` degrees of freedom) it estimates
  ``sigma_machine**2 + sigma_repetition**2 * inv_n`` (``inv_n``: the mean ``1/n`` of those means);
  ``sigma_machine**2`` is the excess, 0 where there is none.

Machines are told apart by their GPUs' UUIDs (:func:`calorimeter.records.machines.machine_keys`); cells without a
per-GPU row are left out. **Regimes**: ``host-bound`` (a repetition kept its GPUs' kernels busy for less than
:data:`~calorimeter.projection.schedule.HOST_BOUND_BUSY_FRAC` of the iteration: the host sets the pace, and hosts
differ) or ``gpu-bound`` (every traced repetition at or above it; untraced ones count as GPU-bound, as in the
projection's validation), crossed with the measured windows' thermal state: ``steady`` where every repetition's window
was thermally steady (the runs table's ``thermally_steady``: every GPU's temperature drift over it below the sensor's
1 °C, :mod:`calorimeter.records.steadiness`), else ``transient`` (its temperature, power and clock still moved with
the warm-up). Tables written before that column judge by the warm-up instead (``steady`` where it was ``warmup:
steady``).

**A difference** of the means of ``n_ref`` and ``n_rep`` repetitions has the variance
``sigma_repetition**2 * (1/n_ref + 1/n_rep) + c * sigma_machine**2``, where ``c`` is the sum over machines of (the
reference's share of repetitions on it - the reproduction's)**2: 0 when both ran on the same machines, 2 on two
different ones; its degrees of freedom come from Welch-Satterthwaite over the two pooled estimates. More repetitions
narrow the first term only: a reproduction on another machine cannot be told closer than the machines differ.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from calorimeter.plan.kinds import DEFAULT_KIND, kinds_where
from calorimeter.projection.schedule import HOST_BOUND_BUSY_FRAC
from calorimeter.records.atomic import write_atomic
from calorimeter.records.legacy import config_ids
from calorimeter.records.machines import machine_keys
from calorimeter.reproduce.metrics import METRICS, Metric
from calorimeter.reproduce.sources import load_source

#: where the noise model lives, relative to the checkout
NOISE_FILE = Path("config") / "compare-noise.json"
#: the committed sweeps it is pooled over, relative to the checkout
SWEEP_GLOB = "results/reference/**/tables/runs.parquet"
GPU_BOUND, HOST_BOUND = "gpu-bound", "host-bound"
STEADY, TRANSIENT = "steady", "transient"
THERMAL = (STEADY, TRANSIENT)
#: significant digits kept in the file (a regeneration on another platform compares equal)
DIGITS = 6


def busy_share(runs: pd.DataFrame) -> pd.Series:
    """Each run's GPU kernel time over its iteration time (NaN where no step was traced)."""
    if "kernel_busy_s" not in runs.columns or "iteration_time_s" not in runs.columns:
        return pd.Series(np.nan, index=runs.index)
    it = pd.to_numeric(runs["iteration_time_s"], errors="coerce")
    return pd.to_numeric(runs["kernel_busy_s"], errors="coerce") / it.where(it > 0)


def bound_of(busy: Iterable[float]) -> str:
    """``host-bound`` when any repetition's busy share is below HOST_BOUND_BUSY_FRAC, else ``gpu-bound``."""
    return HOST_BOUND if any(b < HOST_BOUND_BUSY_FRAC for b in busy if math.isfinite(b)) else GPU_BOUND


def warmup_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's warm-up mode: ``steady`` or ``fixed`` (tables older than the column had fixed warm-ups only)."""
    if "warmup_mode" not in runs.columns:
        return pd.Series("fixed", index=runs.index)
    return runs["warmup_mode"].where(runs["warmup_mode"] == "steady", "fixed").astype(str)


def thermal_of(runs: pd.DataFrame) -> pd.Series:
    """Each run's thermal state, ``steady`` or ``transient``: the runs table's ``thermally_steady``; a table older than
    that column (per-cell tables layout 6) has the warm-up mode instead (:func:`warmup_of`)."""
    judged = "thermally_steady" in runs.columns
    steady = runs["thermally_steady"].eq(True) if judged else warmup_of(runs).eq("steady")
    return steady.map({True: STEADY, False: TRANSIENT}).astype(str)


def thermal_regime(states: Iterable[str]) -> str:
    """``steady`` when every repetition's window was (:func:`thermal_of`), else ``transient``."""
    return STEADY if all(s == STEADY for s in states) else TRANSIENT


def transformed(values: Iterable[float], metric: Metric) -> np.ndarray:
    """The finite values on the metric's noise scale (log for relative metrics, whose values must be > 0)."""
    a = np.asarray(list(values), dtype=float)
    a = a[np.isfinite(a) & ((a > 0) if metric.relative else True)]
    return np.log(a) if metric.relative else a


@dataclass(frozen=True)
class Noise:
    """The noise of one metric in one regime.

    Attributes:
        metric, bound, thermal: what it is the noise of.
        scale: ``log`` (standard deviations are fractions) or ``linear`` (in the metric's unit).
        repetition_sd: sigma_repetition.
        repetition_dof: its degrees of freedom (0: no configuration of the regime was repeated on one machine).
        repetition_groups: the groups of repetitions it pools.
        machine_var: pooled variance of a machine's mean about its configuration's mean (NaN without any).
        machine_dof: its degrees of freedom (0: no configuration of the regime ran on two machines).
        machine_configurations: the configurations measured on two machines or more.
        inv_n: mean 1 / repetitions of the machine means in ``machine_var``.
    """

    metric: str
    bound: str
    thermal: str
    scale: str
    repetition_sd: float
    repetition_dof: int
    repetition_groups: int
    machine_var: float
    machine_dof: int
    machine_configurations: int
    inv_n: float

    @property
    def machine_sd(self) -> float:
        """sigma_machine (0 where the machines add nothing beyond the repetitions; NaN where unknown)."""
        if self.machine_dof < 1:
            return math.nan
        return math.sqrt(max(0.0, self.machine_var - self.repetition_sd**2 * self.inv_n))

    def difference(self, n_ref: int, n_rep: int, machines: float) -> tuple[float, float, str]:
        """Standard error and degrees of freedom of a difference of means of ``n_ref`` and ``n_rep`` repetitions whose
        machines differ by ``machines`` (``c`` of the module's docstring); NaN and the reason where the committed sets
        cannot tell."""
        if self.repetition_dof < 1:
            return math.nan, 0.0, f"no configuration {self.bound} with {self.thermal} windows was repeated on one " \
                                  "machine in the committed sets"
        vr, a = self.repetition_sd**2, 1.0 / n_ref + 1.0 / n_rep
        if machines <= 0 or (self.machine_dof >= 1 and self.machine_var - vr * self.inv_n <= 0):
            return math.sqrt(a * vr), float(self.repetition_dof), ""
        if self.machine_dof < 1:
            return math.nan, 0.0, f"the sides ran on different machines and no configuration {self.bound} with a " \
                                  f"{self.thermal} windows ran on two machines in the committed sets"
        first, second = (a - machines * self.inv_n) * vr, machines * self.machine_var
        var = first + second
        dof = var**2 / (first**2 / self.repetition_dof + second**2 / self.machine_dof)
        return math.sqrt(var), float(dof), ""


@dataclass(frozen=True)
class NoiseModel:
    """Every metric's noise per regime, and what it was pooled over."""

    noise: tuple[Noise, ...]
    sweeps: tuple[str, ...]
    hardware: tuple[str, ...]

    def get(self, metric: str, bound: str, thermal: str) -> Noise | None:
        """The noise of ``metric`` in a regime (None where the file has no such row)."""
        return next((n for n in self.noise if (n.metric, n.bound, n.thermal) == (metric, bound, thermal)), None)

    def to_json(self) -> dict:
        """The file's content (numbers rounded to :data:`DIGITS` significant digits)."""
        def r(x: object) -> object:
            if not isinstance(x, float):
                return x
            return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else None
        return {"what": "run-to-run noise per metric and regime for `calorimeter compare` (src/calorimeter/reproduce/"
                        "noise.py); do not edit: regenerate with `python -m calorimeter.reproduce.noise --write`",
                "host_bound_busy_frac": HOST_BOUND_BUSY_FRAC, "hardware": list(self.hardware),
                "sweeps": list(self.sweeps), "noise": [{k: r(v) for k, v in asdict(n).items()} for n in self.noise]}

    @classmethod
    def from_json(cls, d: dict) -> NoiseModel:
        """From :meth:`to_json`'s form."""
        names = {f.name for f in fields(Noise)}
        rows = tuple(Noise(**{k: (math.nan if v is None else v) for k, v in row.items() if k in names})
                     for row in d["noise"])
        return cls(rows, tuple(d.get("sweeps", ())), tuple(d.get("hardware", ())))


def load_noise(path: str | Path | None = None) -> NoiseModel:
    """The committed noise model (``path`` None: :data:`NOISE_FILE` of this checkout).

    Raises:
        FileNotFoundError: no such file (the message says how to make it).
    """
    p = Path(path) if path else Path(__file__).resolve().parents[3] / NOISE_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no noise model; make it with `python -m calorimeter.reproduce.noise --write` "
                                "in a calorimeter checkout, or name one with --noise")
    return NoiseModel.from_json(json.loads(p.read_text()))


def observations(sweeps: Iterable[str | Path]) -> pd.DataFrame:
    """One row per ok training run of the sweeps: sweep, configuration, engine fingerprint, warm-up mode, thermal state,
    busy share, machine and every compared metric (runs whose machine is unknown are left out)."""
    frames, gpus = [], []
    for i, sweep in enumerate(sweeps):
        src = load_source(sweep)
        r = src.runs
        if r.empty or src.gpus.empty:
            continue
        r = r[(r["status"] == "ok") & r["kind"].fillna(DEFAULT_KIND).isin(kinds_where(trains_model=True))]
        tag = f"{i}:"
        frames.append(pd.DataFrame({
            "sweep": str(sweep), "cell": tag + r["cell_id"].astype(str), "config": config_ids(r),
            "hardware": r["hardware"].astype(str),
            "engine": [src.engines.get(c, "") for c in r["cell_id"]], "warmup": warmup_of(r), "thermal": thermal_of(r),
            "busy": busy_share(r),
            **{m.column: pd.to_numeric(r[m.column], errors="coerce") if m.column in r.columns else np.nan
               for m in METRICS}}))
        gpus.append(src.gpus.assign(cell_id=tag + src.gpus["cell_id"].astype(str)))
    if not frames:
        return pd.DataFrame()
    obs = pd.concat(frames, ignore_index=True)
    obs["machine"] = obs["cell"].map(machine_keys(pd.concat(gpus, ignore_index=True)))
    return obs[obs["machine"].notna()].reset_index(drop=True)


def estimate(obs: pd.DataFrame, metric: Metric) -> list[Noise]:
    """The noise of ``metric`` in every regime, from :func:`observations`."""
    within: dict[tuple[str, str], list[tuple[float, int]]] = {}
    between: dict[tuple[str, str], list[tuple[float, int, float]]] = {}
    for _, g in obs.groupby(["sweep", "config", "machine"], sort=True):
        y = transformed(g[metric.column], metric)
        if y.size >= 2:
            key = (bound_of(g["busy"]), thermal_regime(g["thermal"]))
            within.setdefault(key, []).append((float(((y - y.mean()) ** 2).sum()), int(y.size - 1)))
    for _, g in obs.groupby(["config", "warmup", "engine"], sort=True):
        means, inv = [], []
        for _, gm in g.groupby("machine", sort=True):
            y = transformed(gm[metric.column], metric)
            if y.size:
                means.append(float(y.mean()))
                inv.append(1.0 / y.size)
        if len(means) >= 2:
            key = (bound_of(g["busy"]), thermal_regime(g["thermal"]))
            m = np.asarray(means)
            between.setdefault(key, []).append((float(((m - m.mean()) ** 2).sum()), len(m) - 1, float(np.mean(inv))))
    out = []
    for bound in (GPU_BOUND, HOST_BOUND):
        for thermal in THERMAL:
            w, b = within.get((bound, thermal), []), between.get((bound, thermal), [])
            dof_w, dof_b = sum(d for _, d in w), sum(d for _, d, _ in b)
            out.append(Noise(
                metric.column, bound, thermal, "log" if metric.relative else "linear",
                math.sqrt(sum(s for s, _ in w) / dof_w) if dof_w else math.nan, dof_w, len(w),
                sum(q for q, _, _ in b) / dof_b if dof_b else math.nan, dof_b, len(b),
                sum(d * h for _, d, h in b) / dof_b if dof_b else math.nan))
    return out


def committed_sweeps(root: str | Path) -> list[str]:
    """Every committed sweep with tables, relative to ``root``."""
    root = Path(root)
    return sorted(str(p.parent.parent.relative_to(root)) for p in root.glob(SWEEP_GLOB))


def build(root: str | Path = ".") -> NoiseModel:
    """The noise model of every committed sweep under ``root``."""
    root = Path(root)
    sweeps = committed_sweeps(root)
    obs = observations([root / s for s in sweeps])
    hardware = tuple(sorted(set(obs["hardware"]))) if len(obs) else ()
    return NoiseModel(tuple(n for m in METRICS for n in estimate(obs, m)), tuple(sweeps), hardware)


def table(model: NoiseModel) -> pd.DataFrame:
    """The model for the reader: standard deviations in percent (ratios) or °C."""
    rows = []
    for n in model.noise:
        f = 100.0 if n.scale == "log" else 1.0
        rows.append({"metric": n.metric, "regime": f"{n.bound}, {n.thermal}", "unit": "%" if n.scale == "log" else "°C",
                     "repetition_sd": round(f * n.repetition_sd, 3), "dof": n.repetition_dof,
                     "machine_sd": round(f * n.machine_sd, 3), "machine_dof": n.machine_dof,
                     "configurations_on_2+_machines": n.machine_configurations})
    return pd.DataFrame(rows)


def same(a: object, b: object, rel: float = 1e-4) -> bool:
    """Whether two of :meth:`NoiseModel.to_json`'s forms agree (numbers within ``rel``: a regeneration on another
    platform may differ in the last digit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=rel)
    return a == b


def main(argv: list[str] | None = None) -> int:
    """``python -m calorimeter.reproduce.noise [--write | --check] [--root DIR]``: print the noise model of the
    committed sets; write it to the checkout's file, or check that the file is up to date (exit 1 when not)."""
    ap = argparse.ArgumentParser(prog="python -m calorimeter.reproduce.noise", description=main.__doc__)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[3]), help="the checkout (default: this one)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {NOISE_FILE}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {NOISE_FILE} differs from the sets")
    args = ap.parse_args(argv)
    model = build(args.root)
    with pd.option_context("display.width", 200):
        print(table(model).to_string(index=False))
    path = Path(args.root) / NOISE_FILE
    text = json.dumps(model.to_json(), indent=1, ensure_ascii=False) + "\n"
    if args.write:
        write_atomic(path, lambda tmp: tmp.write_text(text))
        print(f"written {path}")
    elif args.check:
        if not path.is_file() or not same(json.loads(path.read_text()), model.to_json()):
            print(f"{path} is not the noise of the committed sets: regenerate it with "
                  "`python -m calorimeter.reproduce.noise --write`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
