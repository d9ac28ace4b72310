"""A host's thermal profile: how each of its GPUs (by UUID) sustains clocks, heat and power under a load.

A profile is built from recorded telemetry, never guessed:

* from a ``thermal-calibration`` cell (:mod:`calorimeter.placement.calibrate`): the same bf16 matmul load on every
  GPU of the host at once, each GPU's matmul rate measured (``tflops``); or
* from any earlier cell that ran on the host and loaded its GPUs symmetrically (:func:`cell_eligibility`: status
  ok, pp = 1, a dense model, a measured window of at least ``MIN_WINDOW_S``, every GPU drawing at least
  ``MIN_LOAD_FRACTION`` of its power limit). A pipeline cell is never used: its stages load the GPUs unequally, so
  its clocks mix the GPU with the stage it ran.

Per GPU the profile keeps the time-weighted averages over the measured window (SM clock, temperature, HBM
temperature, power, power limit, utilisation), the SM clock minimum and temperature peak, and the share of time
each clock-event (throttle) reason was set: the same statistics as the analysis (:mod:`calorimeter.analysis.window`).
``speed`` is the GPU's relative sustained throughput on that host: its matmul rate over the fastest GPU's when every
GPU has one (calibration), else its average SM clock over the highest (under a power cap the GEMM rate follows the
clock).

Freshness (:func:`staleness`): a profile is used only while it is younger than ``max_age_h`` (default
``DEFAULT_MAX_AGE_H``), covers every GPU the job has on that host (a replaced GPU invalidates it), and was taken
under the same driver version and enforced power limits (under dense load the power cap, not heat, sets the
clock, so a changed cap changes the profile). Profiles live in ``<results_dir>/thermal-profiles/<host>.json``;
every saved profile is also kept under ``history/`` (nothing measured is overwritten).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.analysis.cell import CellTables, cell_tables
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import kind_of
from calorimeter.plan.settings import PlacementSettings
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import CellPaths
from calorimeter.records.run_record import RunRecord, read_run_record
from calorimeter.telemetry.reasons import THROTTLING

FORMAT_VERSION = 1
#: a profile older than this is stale (hours): ``placement.profile_max_age_h``'s default
DEFAULT_MAX_AGE_H = PlacementSettings.profile_max_age_h
#: shortest measured window a cell-derived profile accepts (die temperature settles within 5-22 s, clocks under a
#: power cap within a second; see docs/placement.md)
MIN_WINDOW_S = 5.0
#: a GPU counts as loaded when its average power is at least this share of its enforced power limit
MIN_LOAD_FRACTION = 0.5
#: a cell-derived profile needs its load to have held the clocks at a limit (power cap or a thermal/slowdown
#: reason) for at least this share of the window on every GPU: below it, clocks sat at their maximum and say nothing
#: about which GPU sustains more under a heavy load
MIN_LIMITED_SHARE = 0.5
#: throttle reasons kept in a profile (the clock-limiting reasons of :mod:`calorimeter.telemetry.reasons`)
THROTTLE_KEYS = THROTTLING


@dataclass(frozen=True)
class GpuThermal:
    """One GPU of a profile (NaN where a quantity was not measured)."""

    uuid: str
    nvml_index: int
    name: str = ""
    pci_bus_id: str = ""
    sm_clock_avg_mhz: float = math.nan
    sm_clock_min_mhz: float = math.nan
    max_sm_clock_mhz: float = math.nan
    temp_avg_c: float = math.nan
    temp_peak_c: float = math.nan
    hbm_temp_avg_c: float = math.nan
    power_avg_w: float = math.nan
    power_limit_w: float = math.nan
    gpu_util_avg_pct: float = math.nan
    throttle: dict[str, float] = field(default_factory=dict)
    tflops: float = math.nan
    speed: float = math.nan


@dataclass(frozen=True)
class ThermalProfile:
    """The thermal profile of one host.

    Attributes:
        host: hostname as the sampler recorded it.
        taken_s: end of the window the profile summarises (Unix seconds).
        window_s: seconds summarised.
        source: what produced the load: ``kind`` (``calibration`` or ``cell``), ``sweep``, ``cell_id``, ``load``.
        conditions: driver version, the idle temperatures before the load where known, anything else that shapes it.
        speed_metric: ``tflops`` (measured matmul rate) or ``sm_clock_avg_mhz``.
        gpus: one entry per GPU, by NVML index.
    """

    host: str
    taken_s: float
    window_s: float
    source: JsonObject
    conditions: JsonObject
    speed_metric: str
    gpus: tuple[GpuThermal, ...]
    format_version: int = FORMAT_VERSION

    def gpu(self, uuid: str) -> GpuThermal | None:
        """The entry of a GPU by UUID (None when the profile does not cover it)."""
        return next((g for g in self.gpus if g.uuid == uuid), None)

    @property
    def uuids(self) -> set[str]:
        """UUIDs of the GPUs the profile covers."""
        return {g.uuid for g in self.gpus}

    def to_dict(self) -> JsonObject:
        """JSON-able form (NaN written as null by the JSON writer)."""
        d = asdict(self)
        d["taken_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.taken_s))
        d["gpus"] = [asdict(g) for g in self.gpus]
        return d

    @classmethod
    def from_dict(cls, d: JsonObject) -> ThermalProfile:
        """Inverse of :meth:`to_dict` (null numbers become NaN)."""
        gfields = GpuThermal.__dataclass_fields__
        gpus = []
        for g in d.get("gpus") or []:
            kw = {k: v for k, v in g.items() if k in gfields}
            for k, f in gfields.items():
                if f.type == "float" and kw.get(k) is None:
                    kw.pop(k, None)
            kw["throttle"] = {k: _num(v) for k, v in (g.get("throttle") or {}).items()}
            gpus.append(GpuThermal(**kw))
        return cls(host=d["host"], taken_s=float(d["taken_s"]), window_s=float(d.get("window_s") or math.nan),
                   source=dict(d.get("source") or {}), conditions=dict(d.get("conditions") or {}),
                   speed_metric=str(d.get("speed_metric") or "sm_clock_avg_mhz"),
                   gpus=tuple(sorted(gpus, key=lambda g: g.nvml_index)),
                   format_version=int(d.get("format_version", 0)))

    def summary(self) -> str:
        """One line: host, age basis, and per GPU index: speed, clock, temperature."""
        parts = [f"{g.nvml_index}: speed {g.speed:.3f}, {g.sm_clock_avg_mhz:.0f} MHz, {g.temp_avg_c:.1f} C"
                 for g in self.gpus]
        return f"{self.host} ({self.source.get('kind')}, {self.speed_metric}): " + "; ".join(parts)


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def relative_speeds(values: list[float]) -> list[float]:
    """Each value over the largest finite one (NaN where a value is not finite or none is)."""
    finite = [v for v in values if math.isfinite(v) and v > 0]
    top = max(finite) if finite else math.nan
    return [v / top if math.isfinite(v) and v > 0 and math.isfinite(top) else math.nan for v in values]


def build_profile(host: str, stats: pd.DataFrame, gpu_meta: list[JsonObject], begin_s: float, end_s: float,
                  source: JsonObject, conditions: JsonObject | None = None,
                  tflops: dict[int, float] | None = None) -> ThermalProfile:
    """A profile from per-GPU window statistics of one host.

    Args:
        host: hostname.
        stats: one row per GPU with ``gpu_index`` and the columns of
            :func:`calorimeter.analysis.window.gpu_window_stats` over ``[begin_s, end_s]``.
        gpu_meta: the sampler's GPU list of that host (``telemetry.json``: ``gpu_index``, ``uuid``, ``name``,
            ``pci_bus_id``, ``max_sm_clock_mhz``).
        begin_s, end_s: the window.
        source: what the load was.
        conditions: further conditions (driver version, ...).
        tflops: measured matmul rate per NVML index (calibration), if any.

    Raises:
        ValueError: a GPU of ``stats`` has no UUID in ``gpu_meta`` (a profile is keyed by UUID).
    """
    meta = {int(g["gpu_index"]): g for g in gpu_meta}
    tflops = tflops or {}
    rows = []
    for r in stats.sort_values("gpu_index").to_dict("records"):
        idx = int(r["gpu_index"])
        m = meta.get(idx) or {}
        if not m.get("uuid"):
            raise ValueError(f"host {host}: GPU {idx} has no UUID in the sampler metadata")
        rows.append(dict(
            uuid=str(m["uuid"]), nvml_index=idx, name=str(m.get("name") or ""),
            pci_bus_id=str(m.get("pci_bus_id") or ""),
            sm_clock_avg_mhz=_num(r.get("sm_clock_avg_mhz")), sm_clock_min_mhz=_num(r.get("sm_clock_min_mhz")),
            max_sm_clock_mhz=_num(m.get("max_sm_clock_mhz")),
            temp_avg_c=_num(r.get("temp_avg_c")), temp_peak_c=_num(r.get("temp_peak_c")),
            hbm_temp_avg_c=_num(r.get("hbm_temp_avg_c")), power_avg_w=_num(r.get("power_avg_w")),
            power_limit_w=_num(r.get("power_limit_avg_w", m.get("power_limit_w", m.get("power_limit_default_w")))),
            gpu_util_avg_pct=_num(r.get("gpu_util_avg_pct")),
            throttle={k: _num(r.get(f"throttle_{k}_frac")) for k in THROTTLE_KEYS},
            tflops=_num(tflops.get(idx, math.nan)),
        ))
    use_tflops = bool(rows) and all(math.isfinite(x["tflops"]) and x["tflops"] > 0 for x in rows)
    metric = "tflops" if use_tflops else "sm_clock_avg_mhz"
    for row, s in zip(rows, relative_speeds([x[metric] for x in rows]), strict=True):
        row["speed"] = s
    return ThermalProfile(host=host, taken_s=float(end_s), window_s=float(end_s - begin_s), source=dict(source),
                          conditions=dict(conditions or {}), speed_metric=metric,
                          gpus=tuple(GpuThermal(**x) for x in rows))


# ---------------------------------------------------------------------------------------------------------------
# profiles from recorded cells


def is_calibration(record: RunRecord) -> bool:
    """Whether the record is of a kind that profiles its hosts by design (``thermal-calibration``)."""
    kind = kind_of(record.kind)
    return kind is not None and kind.profiles_hosts


def cell_eligibility(record: RunRecord) -> list[str]:
    """Why a cell's telemetry cannot profile its host (empty when it can; see the module docstring)."""
    cell = record.cell
    model = record.model or {}
    reasons = []
    if not record.ok:
        reasons.append(f"status {record.status}")
    if is_calibration(record):
        return reasons
    if int(cell.get("pp") or 1) != 1:
        reasons.append(f"pp={cell.get('pp')}: pipeline stages load the GPUs unequally")
    if int(model.get("num_experts") or 0) > 0:
        reasons.append("mixture-of-experts: routing loads the GPUs unequally")
    return reasons


def _load_stats(stats: pd.DataFrame, need_limited: bool = True) -> list[str]:
    """Reasons why the GPUs of a window were not under a sustained load."""
    out = []
    for r in stats.to_dict("records"):
        limited = max((_num(r.get(f"throttle_{k}_frac")) for k in THROTTLE_KEYS), default=math.nan)
        if need_limited and not limited >= MIN_LIMITED_SHARE:
            out.append(f"GPU {r.get('gpu_index')}: clocks limited {limited:.0%} of the window (less than "
                       f"{MIN_LIMITED_SHARE:.0%}): the load did not hold the GPU at a limit")
        p, lim = _num(r.get("power_avg_w")), _num(r.get("power_limit_avg_w"))
        if not math.isfinite(lim) or lim <= 0:
            lim = _num(r.get("power_limit_w"))
        if not math.isfinite(p):
            out.append(f"GPU {r.get('gpu_index')}: no power samples")
        elif math.isfinite(lim) and lim > 0 and p < MIN_LOAD_FRACTION * lim:
            out.append(f"GPU {r.get('gpu_index')}: {p:.0f} W is below {MIN_LOAD_FRACTION:.0%} of its {lim:.0f} W "
                       "limit (not a load)")
    return out


def calibration_tflops(record: RunRecord) -> dict[tuple[int, int], float]:
    """Measured matmul rate per (node, NVML index) from a calibration cell's record (empty for other cells)."""
    out: dict[tuple[int, int], float] = {}
    for g in record.metrics.get("gpus") or []:
        if g.get("node") is not None and g.get("nvml_index") is not None and g.get("tflops") is not None:
            out[(int(g["node"]), int(g["nvml_index"]))] = float(g["tflops"])
    return out


def profiles_from_cell(cell_dir: str | Path, record: RunRecord | None = None,
                       tflops: dict[tuple[int, int], float] | None = None, tables: CellTables | None = None
                       ) -> tuple[list[ThermalProfile], list[str]]:
    """Profiles of the hosts of one recorded cell (one per node), and why none could be made.

    The per-GPU statistics are the analysis' own (:func:`calorimeter.analysis.cell.cell_tables`: the measured
    window, each GPU found by the ranks' NVML index).

    Args:
        cell_dir: the cell's folder (``run.json``, ``steps.parquet``, ``telemetry.parquet``, ``telemetry.json``).
        record: its ``run.json``, if already read.
        tflops: measured matmul rate per (node, NVML index); default: a calibration record's ``metrics``.
        tables: the cell's tables, when already computed (rule ``cell_tables`` wrote them); computed if None.

    Returns:
        (profiles, reasons): the profiles, and the reasons for every host (or the whole cell) left out.
    """
    paths = CellPaths(Path(cell_dir))
    record = record if record is not None else read_run_record(paths.run_json)
    tflops = calibration_tflops(record) if tflops is None else tflops
    reasons = cell_eligibility(record)
    if reasons:
        return [], reasons
    missing = [p.name for p in (paths.steps, paths.telemetry, paths.telemetry_json) if not p.is_file()]
    if paths.telemetry.name in missing and paths.telemetry_json.is_file():
        return [], ["no GPU telemetry (CPU ranks, or no GPU the sampler could read)"]
    if missing:
        return [], [f"no {', '.join(missing)}"]
    tables = tables if tables is not None else cell_tables(paths.root, record)
    run = tables.runs.iloc[0]
    begin, end = float(run.get("measured_begin_s", math.nan)), float(run.get("measured_end_s", math.nan))
    if not end - begin >= MIN_WINDOW_S:
        return [], [f"measured window {end - begin:.1f} s is shorter than {MIN_WINDOW_S:.0f} s"]
    if run.get("gpu_mapping") != "nvml_index" or tables.gpus.empty:
        return [], ["ranks have no NVML index: the cell's GPUs are not known"]
    stats = tables.gpus.merge(_power_limits(pd.read_parquet(paths.telemetry), begin, end),
                              on=["node", "gpu_index"], how="left")
    meta = json.loads(paths.telemetry_json.read_text())
    cell = record.cell
    profiles: list[ThermalProfile] = []
    for node, g in stats.groupby("node", sort=True):
        host = str(g["hostname"].iloc[0])
        node_meta = (meta.get(f"node{int(node)}") or {}).get("sampler") or {}
        low = _load_stats(g, need_limited=not is_calibration(record))
        if low:
            reasons += [f"{host}: {r}" for r in low]
            continue
        lib = node_meta.get("gpu_library") or {}
        source = {"kind": "calibration" if is_calibration(record) else "cell",
                  "sweep": cell.get("sweep"), "cell_id": record.cell_id, "load": _load_text(record)}
        conditions = {"driver": lib.get("driver_version"), "gpus_in_cell": int(len(g)),
                      "data_quality": ",".join(sorted(set(g.get("data_quality", pd.Series(dtype=str)).astype(str))))}
        node_tflops = {idx: v for (n, idx), v in (tflops or {}).items() if n == int(node)}
        try:
            profiles.append(build_profile(host, g, node_meta.get("gpus") or [], begin, end, source, conditions,
                                          node_tflops))
        except ValueError as e:
            reasons.append(str(e))
    return profiles, reasons


def _power_limits(tele: pd.DataFrame, begin: float, end: float) -> pd.DataFrame:
    """Median enforced power limit per GPU over the window (``power_limit_avg_w``)."""
    w = tele[(tele["time_s"] >= begin) & (tele["time_s"] <= end)]
    if "power_limit_w" not in w.columns or w.empty:
        return pd.DataFrame(columns=["node", "gpu_index", "power_limit_avg_w"])
    lim = w.groupby(["node", "gpu_index"])["power_limit_w"].median().rename("power_limit_avg_w")
    return lim.reset_index()


def _load_text(record: RunRecord) -> str:
    cell = record.cell
    if is_calibration(record):
        return str(record.metrics.get("load") or "thermal calibration")
    return (f"training {cell.get('model')} {cell.get('parallel_label')} z{cell.get('zero_stage')} "
            f"rc-{cell.get('recompute')} mb{cell.get('micro_batch')} s{cell.get('seq_len')} {cell.get('precision')}")


# ---------------------------------------------------------------------------------------------------------------
# freshness


@dataclass(frozen=True)
class HostGpus:
    """What a host has now (read through NVML inside the job): GPUs by UUID with their enforced power limit."""

    host: str
    driver: str | None
    power_limit_w: dict[str, float]


def staleness(profile: ThermalProfile | None, now_s: float, current: HostGpus | None = None,
              max_age_h: float = DEFAULT_MAX_AGE_H, needed_uuids: set[str] | None = None) -> str | None:
    """Why a profile must not be used now (None when it is fresh).

    Args:
        profile: the stored profile (None: there is none).
        now_s: the current time (Unix seconds).
        current: the host's GPUs now; without it only age and format are checked (e.g. another node's profile).
        max_age_h: maximum age in hours.
        needed_uuids: GPUs the decision needs; each must be in the profile.
    """
    if profile is None:
        return "no thermal profile for this host"
    if profile.format_version != FORMAT_VERSION:
        return f"profile format {profile.format_version} is not {FORMAT_VERSION}"
    age_h = (now_s - profile.taken_s) / 3600.0
    if age_h > max_age_h:
        return f"profile is {age_h:.1f} h old (more than {max_age_h:g} h)"
    if age_h < -0.1:
        return f"profile is from the future ({-age_h:.1f} h): clocks disagree"
    need = set(needed_uuids or ())
    if current is not None:
        need |= set(current.power_limit_w)
        if current.driver and profile.conditions.get("driver") and current.driver != profile.conditions["driver"]:
            return f"driver changed ({profile.conditions['driver']} -> {current.driver})"
        for uuid, lim in current.power_limit_w.items():
            g = profile.gpu(uuid)
            if g is not None and math.isfinite(g.power_limit_w) and math.isfinite(lim) \
                    and abs(g.power_limit_w - lim) > 1.0:
                return f"power limit of GPU {g.nvml_index} changed ({g.power_limit_w:.0f} -> {lim:.0f} W)"
    missing = sorted(need - profile.uuids)
    if missing:
        return f"profile does not cover GPU(s) {', '.join(missing)}"
    if any(not math.isfinite(profile.gpu(u).speed) for u in need if profile.gpu(u) is not None):
        return "profile has no speed for a needed GPU"
    return None


# ---------------------------------------------------------------------------------------------------------------
# store


def host_key(host: str) -> str:
    """Filesystem-safe file stem of a hostname."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in host) or "unknown-host"


def profile_path(profiles_dir: str | Path, host: str) -> Path:
    """Where the current profile of a host is kept."""
    return Path(profiles_dir) / f"{host_key(host)}.json"


def load_profile(profiles_dir: str | Path, host: str) -> ThermalProfile | None:
    """The stored profile of a host (also found by its short name), or None."""
    for name in dict.fromkeys((host, host.split(".")[0])):
        p = profile_path(profiles_dir, name)
        if p.is_file():
            try:
                return ThermalProfile.from_dict(json.loads(p.read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                return None
    return None


def replaces(old: ThermalProfile | None, new: ThermalProfile, now_s: float,
             max_age_h: float = DEFAULT_MAX_AGE_H) -> bool:
    """Whether ``new`` should become the host's current profile.

    It does when there is none, the old one is stale, or ``new`` is newer and covers at least the old one's GPUs;
    a profile derived from a training cell never replaces a fresh calibration profile.
    """
    if old is None or staleness(old, now_s, max_age_h=max_age_h) is not None:
        return True
    if old.source.get("kind") == "calibration" and new.source.get("kind") != "calibration":
        return False
    return new.taken_s >= old.taken_s and new.uuids >= old.uuids


def save_profile(profiles_dir: str | Path, profile: ThermalProfile, now_s: float | None = None,
                 max_age_h: float = DEFAULT_MAX_AGE_H) -> tuple[Path, bool]:
    """Keep a profile: always in ``history/``, and as the host's current profile when :func:`replaces` says so.

    Returns:
        (path of the history copy, whether it became the current profile).
    """
    profiles_dir = Path(profiles_dir)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(profile.taken_s))
    hist = profiles_dir / "history" / f"{host_key(profile.host)}-{stamp}-{profile.source.get('kind', 'x')}.json"
    write_json_atomic(hist, profile.to_dict())
    now_s = time.time() if now_s is None else now_s
    current = replaces(load_profile(profiles_dir, profile.host), profile, now_s, max_age_h)
    if current:
        write_json_atomic(profile_path(profiles_dir, profile.host), profile.to_dict())
    return hist, current


def keep_cell_profiles(cell_dir: str | Path, record: RunRecord, settings: PlacementSettings,
                       tables: CellTables | None = None, tflops: dict[tuple[int, int], float] | None = None
                       ) -> JsonObject:
    """Profile a recorded cell's hosts from its tables and keep the profiles (rule ``thermal_profile``).

    Runs for every calibration cell, and for other cells when ``placement.derive_profiles`` is on (default) and
    the cell qualifies (:func:`cell_eligibility`). Never raises: a profile is a by-product of a measurement.

    Returns:
        What happened, JSON-able: ``written`` (history files), ``current`` (hosts whose current profile it became),
        ``reasons`` (why a host, or the cell, gave none).
    """
    import logging

    log = logging.getLogger(__name__)
    out: JsonObject = {"cell_id": record.cell_id, "written": [], "current": [], "reasons": []}
    calibration = is_calibration(record)
    if not settings.profiles_dir or not (calibration or settings.derive_profiles):
        out["reasons"].append("placement.derive_profiles is off" if settings.profiles_dir else "no profiles folder")
        return out
    try:
        profiles, reasons = profiles_from_cell(cell_dir, record, tflops, tables)
        for p in profiles:
            hist, current = save_profile(settings.profiles_dir, p, max_age_h=settings.profile_max_age_h)
            out["written"].append(str(hist))
            if current:
                out["current"].append(p.host)
            log.info("thermal profile of %s from %s (%s): %s", p.host, record.cell_id,
                     "current" if current else "history only", p.summary())
        out["reasons"] = reasons
        if reasons:
            # a cell that cannot qualify (pipeline, MoE, failed) is not news; an eligible one that fell short is
            level = logging.INFO if calibration or not cell_eligibility(record) else logging.DEBUG
            log.log(level, "no thermal profile from %s: %s", record.cell_id, "; ".join(reasons))
    except Exception as e:  # noqa: BLE001
        log.exception("thermal profile from %s failed", record.cell_id)
        out["reasons"].append(f"failed: {type(e).__name__}: {e}")
    return out
