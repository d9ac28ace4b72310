"""One GPU type's and engine build's calibration: compute rates, host gaps, collective curves, TP overlap and the
power model, from measured cells of that fingerprint.

Built from a :class:`~calorimeter.projection.measured.MeasuredSet` (the committed reference sweeps, or any results
folder) and, where present, the tables of ``collectives`` calibration cells; one calibration per (GPU type, engine
fingerprint). Saved as JSON so a projection of thousands of cells reads it instead of refitting; it names its
fingerprint, every record (sweep folder and cell) it was fitted on, its error bands with their coverage, and the
error measured across fingerprints.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calorimeter.collectives.table import CURVE_COLUMNS, read_collective_points
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.models import get_model, padded_vocab_size, parameter_count
from calorimeter.plan.work import COLLECTIVES, StageWork, workload
from calorimeter.projection.collectives import trace_points
from calorimeter.projection.compute import (
    COMPUTE_CATEGORIES,
    TP_OVERLAP_MECHANISMS,
    ComputeRates,
    fit_compute,
    host_features,
)
from calorimeter.projection.fingerprint import Fingerprint, fingerprint_of
from calorimeter.projection.measured import HOST_BOUND_BUSY_FRAC, MeasuredSet, load_measured
from calorimeter.projection.power import PowerModel, fit_power
from calorimeter.projection.regimes import MOE_PARALLEL_KEYS, PARALLEL_KEYS, RegimeBand
from calorimeter.records.atomic import write_atomic
from calorimeter.records.paths import SweepPaths
from calorimeter.telemetry.kernels import COMM_CATEGORIES

#: the projection model a calibration.json was fitted for; a file of another model is refused when loaded (and the
#: workflow's calibration and validation rules rerun when it changes: it is one of their params). 2: the ZeRO-3 host
#: time of a two-stage host-GPU line (``compute.z3_host``); 1 (absent): a constant GPU idle per ZeRO-3 call
#: (``compute.idle``), which this model cannot read; 3: bands per regime (``regime_bands``,
#: ``machine_spread``: :mod:`calorimeter.projection.regimes`) replace one band per host-boundness plus the
#: cross-fingerprint error for extrapolated rows; 4: the logits elements of a tensor-parallel last stage
#: (``head_elems_vp``: the vocabulary-parallel loss on fp32 logits it materialises) apart from those of the fused loss
MODEL_VERSION = 4

#: the power limit assumed when no telemetry of a calibration cell records it
POWER_LIMIT_COLUMN = "power_limit_w"


@dataclass
class Calibration:
    """Everything fitted for one GPU type and one engine build (fingerprint).

    Attributes:
        hardware: profile name (``h200``).
        compute: per-category compute rates.
        curves: collective curve points (columns :data:`~calorimeter.collectives.table.CURVE_COLUMNS`).
        power: power model, or None when no cell had telemetry.
        cells: the cells fitted on.
        excluded: cell id -> why it was not used for fitting.
        error_band: metric -> relative half-width of the error band (from the validation) of a projected row that is
            not host-bound, empty if none ran.
        error_band_host_bound: the same for a projected row the model calls host-bound (its errors are wider: the
            host's speed; docs/projection.md).
        fingerprint: the engine fingerprint of the cells (:mod:`~calorimeter.projection.fingerprint`), its fields.
        records: sweep folder -> the cell ids of it fitted on.
        recorded_at: the newest cell's launcher stamp (which calibration is newest).
        tp_hidden: tensor-parallel overlap mechanism -> share of the TP communication hidden under compute, as
            measured in the profiled steps of this calibration's cells with that mechanism.
        ranges: feature -> (smallest, largest) value over the fitted cells (group sizes, sequence, model size, GPUs,
            micro-batch): a projected cell outside is flagged ``extrapolated``.
        coverage: the stated coverage of the bands (e.g. 0.9) and the coverage measured on held-out cells.
        cross_fingerprint_error: metric -> relative error measured when cells of another engine build are
            predicted with this calibration (or this build's with another's): the band's widening for a foreign
            fingerprint.
        regime_bands: regime -> its measured band (:class:`~calorimeter.projection.regimes.RegimeBand`, from the
            validation): a projected row takes the widest of its regimes' (:func:`~calorimeter.projection.regimes.
            choose_band`); a regime without one refuses the row.
        machine_spread: base regime -> metric -> half-width of one configuration's spread between machines of this
            class (measured: configurations repeated on machines told apart by their GPUs), the floor of a row's band.
        machines: the machines (:func:`calorimeter.records.machines.machine_keys`) its cells ran on -> cells.
    """

    hardware: str
    compute: ComputeRates
    curves: pd.DataFrame
    power: PowerModel | None
    cells: list[str]
    excluded: dict[str, str] = field(default_factory=dict)
    error_band: dict[str, float] = field(default_factory=dict)
    fingerprint: dict[str, str] = field(default_factory=dict)
    records: dict[str, list[str]] = field(default_factory=dict)
    recorded_at: str = ""
    tp_hidden: dict[str, float] = field(default_factory=dict)
    ranges: dict[str, list[float]] = field(default_factory=dict)
    coverage: dict[str, float] = field(default_factory=dict)
    cross_fingerprint_error: dict[str, float] = field(default_factory=dict)
    error_band_host_bound: dict[str, float] = field(default_factory=dict)
    regime_bands: dict[str, RegimeBand] = field(default_factory=dict)
    machine_spread: dict[str, dict[str, float]] = field(default_factory=dict)
    machines: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``<hardware>/<fingerprint key>``: the calibration's name in calibration.json."""
        return f"{self.hardware}/{Fingerprint.from_dict(self.fingerprint).key}"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"hardware": self.hardware, "key": self.key, "fingerprint": self.fingerprint,
                "recorded_at": self.recorded_at, "records": self.records, "cells": self.cells,
                "error_band": self.error_band, "error_band_host_bound": self.error_band_host_bound,
                "coverage": self.coverage,
                "cross_fingerprint_error": self.cross_fingerprint_error, "ranges": self.ranges,
                "regime_bands": {k: v.to_dict() for k, v in self.regime_bands.items()},
                "machine_spread": self.machine_spread, "machines": self.machines,
                "tp_hidden": self.tp_hidden, "compute": self.compute.to_dict(),
                "power": self.power.to_dict() if self.power else None, "excluded": self.excluded,
                "curves": self.curves[list(CURVE_COLUMNS)].to_dict(orient="records")}

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        """Inverse of :meth:`to_dict`."""
        return cls(hardware=d["hardware"], compute=ComputeRates.from_dict(d["compute"]),
                   curves=pd.DataFrame(d["curves"], columns=list(CURVE_COLUMNS)),
                   power=PowerModel.from_dict(d["power"]) if d.get("power") else None, cells=list(d["cells"]),
                   excluded=dict(d.get("excluded", {})), error_band=dict(d.get("error_band", {})),
                   fingerprint=dict(d.get("fingerprint", {})),
                   records={k: list(v) for k, v in d.get("records", {}).items()},
                   recorded_at=str(d.get("recorded_at", "")), tp_hidden=dict(d.get("tp_hidden", {})),
                   ranges={k: list(v) for k, v in d.get("ranges", {}).items()},
                   coverage=dict(d.get("coverage", {})),
                   cross_fingerprint_error=dict(d.get("cross_fingerprint_error", {})),
                   error_band_host_bound=dict(d.get("error_band_host_bound", {})),
                   regime_bands={k: RegimeBand.from_dict(v) for k, v in d.get("regime_bands", {}).items()},
                   machine_spread={k: dict(v) for k, v in d.get("machine_spread", {}).items()},
                   machines=dict(d.get("machines", {})))

    def save(self, path: str | Path) -> None:
        """Write as JSON."""
        text = json.dumps(self.to_dict(), indent=1, default=float) + "\n"
        write_atomic(Path(path), lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a saved calibration."""
        return cls.from_dict(json.loads(Path(path).read_text()))


@functools.lru_cache(maxsize=4096)
def _recorded_power_limit_w(path: str) -> float | None:
    """The median power limit in one cell's telemetry (None: not recorded); read once per process (a validation
    calibrates ~80 times over the same records)."""
    try:
        v = pd.read_parquet(path, columns=[POWER_LIMIT_COLUMN])[POWER_LIMIT_COLUMN].dropna()
    except (KeyError, ValueError, OSError):
        return None
    return float(v.median()) if len(v) else None


def _power_limit_w(ms: MeasuredSet, cells: list[str]) -> float:
    """The power limit recorded by the calibration cells' telemetry (median), NaN if none recorded it."""
    limits = []
    source = dict(zip(ms.runs["cell_id"], ms.runs["source"], strict=True))
    for cid in cells:
        path = SweepPaths(Path(source[cid])).cell(cid).telemetry
        if path.is_file() and (v := _recorded_power_limit_w(str(path))) is not None:
            limits.append(v)
    return float(pd.Series(limits).median()) if limits else float("nan")


def measured_shares(k: pd.Series | dict, iteration_s: float, pipeline: bool) -> dict[str, float]:
    """Activity shares of one traced rank: GEMM, other compute and communication kernel seconds over the iteration.

    In pipeline cells the send/recv and all-reduce kernels also spin while waiting for other stages; that wait is
    idle time for power, so those categories are left out of ``u_comm`` there.
    """
    other = sum(float(k.get(f"{c}_sum_s", 0.0)) for c in COMPUTE_CATEGORIES if c != "gemm_attention")
    comm = sum(float(k.get(f"{c}_sum_s", 0.0)) for c in COMM_CATEGORIES
               if not (pipeline and c in ("send_recv", "all_reduce")))
    return {"u_gemm": float(k.get("gemm_attention_sum_s", 0.0)) / iteration_s, "u_other": other / iteration_s,
            "u_comm": comm / iteration_s}


#: the calibration range checked for every projected cell (beyond it the row is flagged ``extrapolated``);
#: the ``moe_`` keys hold MoE cells only
RANGE_KEYS: tuple[str, ...] = (*PARALLEL_KEYS, "world_size", "seq_len", "micro_batch", "model_params", "experts",
                               *MOE_PARALLEL_KEYS)


def range_values(cell: Cell) -> dict[str, float]:
    """The values of :data:`RANGE_KEYS` of one cell (``zero3``: 1 where ZeRO-3 shards over dp > 1, else 0;
    ``model_params``: the model's parameter count; ``experts``: its experts per MoE layer, 0 for a dense model;
    ``moe_<key>`` of :data:`calorimeter.projection.regimes.PARALLEL_KEYS` for a MoE cell only, the same degrees)."""
    m = get_model(cell.model)
    v: dict[str, float] = {"tp": cell.tp, "pp": cell.pp, "dp": cell.dp, "ep": cell.ep,
                           "zero3": float(cell.zero_stage == 3 and cell.dp > 1), "world_size": cell.world_size,
                           "seq_len": cell.seq_len, "micro_batch": cell.micro_batch,
                           "model_params": float(parameter_count(m, padded_vocab_size(m, cell.tp))),
                           "experts": m.num_experts if m.is_moe else 0}
    if m.is_moe:
        v.update({moe: v[k] for k, moe in zip(PARALLEL_KEYS, MOE_PARALLEL_KEYS, strict=True)})
    return v


def machine_of(run: pd.Series | dict) -> str | None:
    """The machine a measured cell ran on (the runs' ``machine`` column), None where unknown."""
    m = run.get("machine")
    return str(m) if isinstance(m, str) and m else None


def cell_tp_overlap(cell: Cell, recorded: object) -> str:
    """The tensor-parallel overlap mechanism a cell ran: ``none`` without tp > 1 and overlap, else the recorded
    mechanism (``ring``/``symm_mem``); a record that does not name it ran the engine before TP overlap existed
    (``none``)."""
    if not (cell.overlap and cell.tp > 1):
        return "none"
    return str(recorded) if recorded in TP_OVERLAP_MECHANISMS else "none"


def host_bound_elsewhere(ms: MeasuredSet, own: set[str], fp: Fingerprint) -> list[tuple[str, float, float]]:
    """The traced host-bound cells without pipeline that ran the same software as ``fp`` on another GPU type:
    (cell id, its busiest rank's kernel-busy seconds, its iteration seconds).

    Their host times (launch floor, ZeRO-3 host time) join the host fit of ``fp``'s calibration: in the host-bound
    regime the iteration lasts as long as the host takes to issue it, which depends on the software and the host, not
    on the GPU that runs the kernels. Precondition: the GPU types' nodes have the same host (checked on the measured
    H100 and H200 nodes: docs/projection.md, "Host probe and host times over GPU types"); each machine keeps its own
    factor (:mod:`calorimeter.projection.hosts`). Without it, a GPU type with host-bound cells of only two
    configurations (2x H100: TP2+SP and ZeRO-3 at 2048) fitted a launch floor that put its 1-GPU cells at 2-4x their
    measured time."""
    if not fp.kernels_recorded:
        return []
    runs = ms.runs.set_index("cell_id")
    t_iters = runs["iteration_time_s"].to_dict()
    out = []
    for cid, busy in ms.kernels.groupby("cell_id")["busy_s"].max().items():
        if cid in own or cid not in t_iters:
            continue
        busy, t_iter = float(busy), float(t_iters[cid])
        if is_launch_row(ms.cell(cid), busy, t_iter) and fingerprint_of(runs.loc[cid]).software == fp.software:
            out.append((str(cid), busy, t_iter))
    return out


def is_launch_row(cell: Cell, busy_s: float, iteration_s: float) -> bool:
    """Whether a traced cell calibrates the host's launch and ZeRO-3 host times: host-bound (its busiest rank's
    kernels busy under :data:`HOST_BOUND_BUSY_FRAC` of the iteration) and without pipeline (DeepSpeed's pipeline
    engine steps differently)."""
    return busy_s < HOST_BOUND_BUSY_FRAC * iteration_s and cell.pp == 1


def calibrate(ms: MeasuredSet, hardware: str, collectives: pd.DataFrame | None = None,
              fingerprint: str | None = None) -> Calibration:
    """Fit one calibration on the cells of ``ms`` run on ``hardware`` (and, if given, with this fingerprint key).

    Compute rates and host gaps are fitted on the traced, GPU-bound cells; the host launch time and the ZeRO-3 host
    time on the traced, host-bound cells without pipeline, of this GPU type and of any other that ran the same
    software (:func:`host_bound_elsewhere`); the power model on every GPU with telemetry.

    Args:
        ms: measured cells (any hardware; only ``hardware``'s are used).
        hardware: profile name.
        collectives: points from ``collectives`` calibration cells (:data:`CURVE_COLUMNS`), if any.
        fingerprint: only cells with this fingerprint key (column ``fingerprint``); None: all of that hardware.

    Raises:
        ValueError: no traced, GPU-bound cell of that hardware (and fingerprint).
    """
    get_profile(hardware)
    sel = ms.runs.hardware == hardware
    if fingerprint is not None and "fingerprint" in ms.runs:
        sel &= ms.runs["fingerprint"] == fingerprint
    on_hw = set(ms.runs.loc[sel, "cell_id"])
    traced = set(ms.kernels.cell_id)
    usable = [c for c in ms.calibration_cells() if c in on_hw]
    excluded = {c: "host-bound (GPU busy < 80% of the iteration) or not traced: host gaps and power only"
                for c in on_hw if c not in usable}
    if not usable:
        raise ValueError(f"no traced, GPU-bound measured cell on {hardware!r}"
                         + (f" with fingerprint {fingerprint}" if fingerprint else "") + " to calibrate on")
    comp_rows, comm_rows, power_rows, host_rows, launch_rows = [], [], [], [], []
    launch_busy: list[float] = []
    launch_machines: list[str | None] = []
    launch_configs: list[str] = []
    z3_rows: list[tuple[str, StageWork, float, str, float, str | None]] = []
    power_clock: list[float] = []
    host_machines: list[str | None] = []
    hidden: dict[str, list[float]] = {}
    gpus = ms.gpus
    runs = ms.runs.set_index("cell_id")
    # one row each, the columns read below (a Series lookup per cell was most of a validation's time)
    recs = runs.loc[sorted(on_hw), [c for c in ("iteration_time_s", "tp_overlap", "machine") if c in runs]
                    ].to_dict("index")
    kern_by: dict[str, list[dict]] = {}
    for rec in ms.kernels[ms.kernels.cell_id.isin(on_hw)].to_dict("records"):
        kern_by.setdefault(rec["cell_id"], []).append(rec)
    gpus_by: dict[str, list[dict]] = {}
    for rec in gpus[gpus.cell_id.isin(on_hw)].to_dict("records"):
        gpus_by.setdefault(rec["cell_id"], []).append(rec)
    for cid in sorted(on_hw):
        cell = ms.cell(cid)
        w = workload(cell)
        r = recs[cid]
        t_iter = float(r["iteration_time_s"])
        mech = cell_tp_overlap(cell, r.get("tp_overlap"))
        ranks = kern_by.get(cid, [])
        shares_by_stage = {}
        if ranks:
            busiest = max(ranks, key=lambda k: (k["busy_s"] == k["busy_s"], k["busy_s"]))  # the first, NaN never
            busy = float(busiest["busy_s"])
            if cid in usable:
                host_rows.append((cid, w.stages[int(busiest["stage"])], t_iter - busy))
                host_machines.append(machine_of(r))
                if cell.pp == 1 and host_features(w.stages[0])["z3_calls"] > 0:
                    z3_rows.append((cid, w.stages[0], t_iter, mech, busy, machine_of(r)))
            elif is_launch_row(cell, busy, t_iter):
                launch_rows.append((cid, w.stages[0], t_iter, mech))
                launch_busy.append(busy)
                launch_machines.append(machine_of(r))
                launch_configs.append(f"{cell.config_id}|{mech}")
        for k in ranks:
            st = w.stages[int(k["stage"])]
            if cid in usable:
                comp_rows.append((cid, st, {c: float(k.get(f"{c}_sum_s", 0.0)) for c in COMPUTE_CATEGORIES}))
                # fused TP collectives are no link time; a MoE layer under tensor parallelism issues collectives the
                # workload does not count (the sequence gathered around it, its slots gathered over tp after the
                # all-to-all, each expert's row-parallel all-reduce), so its TP calls would read as slower links
                if mech == "none" and not (w.model.is_moe and cell.tp > 1):
                    comm_rows.append((cid, st.comm, {c: float(k.get(f"{c}_sum_s", 0.0)) for c in COLLECTIVES},
                                      {c: float(k.get(f"{c}_count", 0.0)) for c in COLLECTIVES}))
            comm = sum(float(k.get(f"{c}_sum_s", 0.0)) for c in COMM_CATEGORIES)
            if mech != "none" and comm > 0 and k.get("comm_exposed_s") == k.get("comm_exposed_s"):
                hidden.setdefault(mech, []).append(1.0 - float(k["comm_exposed_s"]) / comm)
            shares_by_stage.setdefault(int(k["stage"]), measured_shares(k, t_iter, cell.pp > 1))
        for g in gpus_by.get(cid, []):
            stage = int(g["stage"]) if g.get("stage") == g.get("stage") else 0
            shares = shares_by_stage.get(stage) or shares_by_stage.get(0)
            if shares and g.get("power_avg_w", 0) > 0:
                power_rows.append((cid, shares, float(g["power_avg_w"])))
                power_clock.append(float(g.get("sm_clock_avg_mhz", float("nan"))))
    engine = fingerprint_of(runs.loc[usable[0]]) if "fingerprint" in runs else None
    if engine is not None:
        for cid, busy, t_iter in host_bound_elsewhere(ms, set(on_hw), engine):
            cell, r = ms.cell(cid), runs.loc[cid]
            mech = cell_tp_overlap(cell, r.get("tp_overlap"))
            launch_rows.append((cid, workload(cell).stages[0], t_iter, mech))
            launch_busy.append(busy)
            launch_machines.append(machine_of(r))
            launch_configs.append(f"{cell.config_id}|{mech}")
    curves = trace_points(comm_rows)[list(CURVE_COLUMNS)]
    if collectives is not None and not collectives.empty:
        curves = pd.concat([collectives[list(CURVE_COLUMNS)], curves], ignore_index=True)
    power = fit_power(power_rows, _power_limit_w(ms, usable), power_clock) if power_rows else None
    fitted = sorted(on_hw & (set(usable) | traced | set(gpus.cell_id)))
    records: dict[str, list[str]] = {}
    for cid in fitted:
        records.setdefault(str(runs.loc[cid, "source"]), []).append(cid)
    fp = engine.engine if engine is not None else {}
    stamps = [str(v) for v in runs.loc[fitted].get("recorded_at", pd.Series(dtype=str)).dropna() if v]
    ranges: dict[str, list[float]] = {}
    for cid in usable:
        for k, v in range_values(ms.cell(cid)).items():
            lo, hi = ranges.get(k, [v, v])
            ranges[k] = [min(lo, v), max(hi, v)]
    rates = fit_compute(comp_rows, host_rows, launch_rows, launch_busy, launch_machines, host_machines,
                        launch_configs, z3_rows)
    return Calibration(hardware, rates, curves, power, fitted, excluded,
                       fingerprint=fp, records=records, recorded_at=max(stamps) if stamps else "",
                       tp_hidden={m: float(np.median(v)) for m, v in hidden.items()}, ranges=ranges,
                       machines={str(m): int(n) for m, n in runs.loc[fitted, "machine"].dropna().value_counts()
                                 .sort_index().items()} if "machine" in runs else {})


def calibrate_all(sources: list[str], collectives: list[str] | None = None,
                  ms: MeasuredSet | None = None) -> dict[str, Calibration]:
    """A calibration for every (GPU type, engine fingerprint) with usable measured cells in ``sources``.

    Args:
        sources: sweep folders with aggregated tables (or engine-benchmark folders).
        collectives: sweep folders holding ``collectives`` calibration cells (their GPU type's curves, used with
            every fingerprint of that GPU type: NCCL's curves do not depend on the training engine's kernels).
        ms: the measured cells when already loaded.

    Returns:
        ``<hardware>/<fingerprint key>`` -> calibration.

    Raises:
        ValueError: no hardware has a usable cell.
    """
    ms = ms if ms is not None else load_measured(list(sources))
    points = collective_points(collectives or [])
    out = {}
    for (hw, key), _ in ms.runs.groupby(["hardware", "fingerprint"], sort=True):
        try:
            cal = calibrate(ms, hw, collectives_for(points, hw), key)
        except ValueError:
            continue
        out[cal.key] = cal
    if not out:
        raise ValueError(f"no usable measured cell in {list(sources)}")
    return out


def collectives_for(points: pd.DataFrame | None, hardware: str) -> pd.DataFrame | None:
    """The collective curve points a calibration of ``hardware`` uses: its own GPU type's; where it has none, a GPU type
    with the same intra-node link (interconnect and bandwidth of the hardware profiles) as a stated fallback, each
    point's ``source`` naming it (the projected row's ``assumed`` says so). Why: NCCL's time over NVLink is the
    link's, and the 2x H100 cells with no H100 curve took the link spec, 2-4x under their traced all-gathers
    (0.10 s against 0.17-0.30 s per iteration); the H200 curves on the same NVLink 4 put them within the traced range
    (docs/projection.md, "Host probe and host times over GPU types")."""
    if points is None or points.empty:
        return None
    own = points[points["hardware"] == hardware]
    if len(own):
        return own
    hw = get_profile(hardware)
    for other, g in points.groupby("hardware", sort=True):
        o = get_profile(str(other))
        if o.interconnect == hw.interconnect and o.link_gbyte_s == hw.link_gbyte_s and hw.link_gbyte_s:
            return g.assign(source=[f"{src} (assumed: {other} curve for {hardware}, same link {hw.interconnect})"
                                    for src in g["source"]])
    return None


def collective_points(sources: list[str]) -> pd.DataFrame:
    """Curve points of every ``collectives`` cell under the given sweep folders (with a ``hardware`` column)."""
    frames = [read_collective_points(s) for s in sources]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*CURVE_COLUMNS, "hardware"])


def load_calibrations(path: str | Path) -> dict[str, Calibration]:
    """The calibrations written by the workflow (``calibrations``: one per GPU type and engine fingerprint).

    Raises:
        ValueError: the file was fitted for another projection model (``model_version`` is not
            :data:`MODEL_VERSION`): its coefficients mean something else here.
    """
    d = json.loads(Path(path).read_text())
    found = d.get("model_version", 1)
    if found != MODEL_VERSION:
        raise ValueError(f"{path}: model_version {found} was fitted for another projection model than this one "
                         f"({MODEL_VERSION}); rebuild it: snakemake projection --forcerun projection_calibrate "
                         "--configfile <your sweep>")
    return {c["key"]: Calibration.from_dict(c) for c in d["calibrations"]}
