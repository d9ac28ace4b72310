"""Validation: calibrate on some measured cells, predict held-out ones, and report the error per cell.

Two designs:

* **leave-one-configuration-out** (:func:`loco`, the default): for every GPU type and engine fingerprint, each
  configuration (a cell's ``config_id`` and TP overlap mechanism; its repetitions held out together) is predicted
  from a calibration on every other cell of that fingerprint. The band of each fold is the stated-coverage quantile
  of the other folds' absolute errors, so the coverage check is itself on held-out cells. Then the
  **cross-fingerprint error**: every other calibration of the same GPU type (an older or different engine build), and
  the other GPU types', predicting the fingerprint's cells.
* **folds of sources** (:func:`validate`, ``projection.validation``): a fold names its training and held-out sweep
  folders.

Each held-out cell gets its measured and predicted iteration time, energy per token, average power, tokens/s/GPU and
MFU, the relative errors, and notes that say what the model had to extrapolate for it (a layout, degree or model
that no training cell has) or why the measurement itself is outside the model (host-bound cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.work import workload
from calorimeter.projection.calibration import Calibration, calibrate, cell_tp_overlap, collectives_for, machine_of
from calorimeter.projection.fingerprint import UNRECORDED
from calorimeter.projection.measured import HOST_BOUND_BUSY_FRAC, MeasuredSet, cell_from_row, load_measured
from calorimeter.projection.model import Projector, extrapolation_band
from calorimeter.records.atomic import write_atomic, write_parquet_atomic

#: metrics compared, measured column = predicted column
METRICS: tuple[str, ...] = ("iteration_time_s", "energy_per_token_j", "power_avg_w", "tokens_per_s_per_gpu", "mfu_full")
#: the targets (issue 23): median absolute error per metric, largest absolute error, mean signed error, on the
#: held-out current-engine cells
TARGET_MEDIAN = {"tokens_per_s_per_gpu": 0.05, "energy_per_token_j": 0.05, "power_avg_w": 0.03}
TARGET_MAX = 0.15
TARGET_MEAN_SIGNED = 0.02
#: the stated coverage of every band: this share of held-out cells lies within it
COVERAGE = 0.9
#: the fewest held-out cells of one regime (host-bound or not, as projected) its own band is built from
BAND_MIN_CELLS = 10
#: work counts whose calibration range is checked (per micro-batch; the optimizer per iteration): a held-out cell
#: beyond RANGE_FACTOR x the largest training value gets a note (its time there extrapolates the fitted rate)
RANGE_FEATURES: tuple[str, ...] = ("dense_flops", "act_elems", "head_elems", "z3_elems", "optim_elems", "moe_elems")
RANGE_FACTOR = 1.5


@dataclass(frozen=True)
class Fold:
    """Train on ``train`` sweep folders, predict the cells of ``test``."""

    name: str
    train: tuple[str, ...]
    test: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fold:
        """From the config's ``projection.validation`` entry."""
        return cls(str(d["name"]), tuple(str(p) for p in d["train"]), tuple(str(p) for p in d["test"]))


def coverage_notes(cell: Cell, train: list[Cell]) -> list[str]:
    """What about ``cell`` no training cell has: the model must extrapolate there."""
    notes = []
    if not train:
        return ["no training cell"]
    if cell.model not in {c.model for c in train}:
        notes.append(f"model {cell.model} never measured")
    moe_tp = [c for c in train if c.ep > 1 or "mixtral" in c.model]
    if "mixtral" in cell.model and cell.tp > 1 and not any(c.tp > 1 for c in moe_tp):
        notes.append("MoE with tp > 1 never measured (dispatch/router replicated over tp)")
    for name in ("tp", "pp", "ep", "world_size"):
        v = getattr(cell, name)
        top = max(getattr(c, name) for c in train)
        if v > top:
            notes.append(f"{name}={v} above the largest measured ({top})")
    if cell.recompute not in {c.recompute for c in train}:
        notes.append(f"recompute={cell.recompute} never measured")
    if cell.zero_stage == 3 and cell.tp > 1 and not any(c.zero_stage == 3 and c.tp > 1 for c in train):
        notes.append("tp x ZeRO-3 never measured")
    top: dict[str, float] = {}
    for c in train:
        for st in workload(c).stages:
            for f in RANGE_FEATURES:
                top[f] = max(top.get(f, 0.0), _range_value(st, f))
    mine = {f: max(_range_value(st, f) for st in workload(cell).stages) for f in RANGE_FEATURES}
    for f in RANGE_FEATURES:
        if mine[f] > RANGE_FACTOR * top.get(f, 0.0) and mine[f] > 0:
            unit = "per rank" if f == "optim_elems" else "per rank and micro-batch"
            notes.append(f"{f} {mine[f]:.3g} {unit} beyond the calibration range (max {top.get(f, 0.0):.3g})")
    return notes


def _range_value(st, feature: str) -> float:
    """A work count as its range is checked: per micro-batch (the shape of the work), the optimizer per iteration."""
    return st.features.get(feature, 0.0) if feature == "optim_elems" else st.per_micro_batch(feature)


def validate_fold(fold: Fold, hardware: str | None = None, measured: dict[str, MeasuredSet] | None = None
                  ) -> pd.DataFrame:
    """Error table of one fold: one row per held-out measured cell on ``hardware`` (default: every hardware the
    training sources calibrate; the training cells of each fingerprint calibrate the held-out cells of the same)."""
    load = (lambda srcs: load_measured(list(srcs))) if measured is None else (
        lambda srcs: _merge([measured[s] for s in srcs]))
    train, test = load(fold.train), load(fold.test)
    hws = [hardware] if hardware else sorted(set(train.runs["hardware"]) & set(test.runs["hardware"]))
    frames = []
    for hw in hws:
        try:
            cal = calibrate(train, hw)
        except ValueError:
            continue
        frames.append(predict_cells(fold.name, cal, train, test, list(test.runs.cell_id[test.runs.hardware == hw])))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def predict_cells(fold: str, cal: Calibration, train: MeasuredSet, test: MeasuredSet, cell_ids: list[str],
                  relation: str = "match") -> pd.DataFrame:
    """One error row per held-out cell of ``test``, predicted with ``cal`` (fitted on ``train``)."""
    proj = Projector(cal, relation=relation)
    train_cells = [train.cell(c) for c in cal.cells if c in set(train.runs.cell_id)]
    runs = test.runs.set_index("cell_id")
    rows = []
    for cid in cell_ids:
        r = runs.loc[cid]
        cell = test.cell(cid)
        p = proj.project(cell, machine_of(r))
        row: dict[str, Any] = {"fold": fold, "cell_id": cid, "config_id": r.get("config_id", cell.config_id),
                               "hardware": cell.hardware, "fingerprint": r.get("fingerprint", ""),
                               "calibration": cal.key, "relation": relation, "source": r.get("source", ""),
                               "model": cell.model, "world_size": cell.world_size,
                               "parallel_label": cell.parallel_label, "recompute": cell.recompute,
                               "zero_stage": cell.zero_stage, "busy_frac": float(r.get("busy_frac", math.nan)),
                               "calibration_cells": len(cal.cells), "predicted_host_bound": p["host_bound"],
                               "machine": p["machine"], "host_factor": p["host_factor"],
                               "extrapolated": p["extrapolated"], "extrapolated_parts": p["extrapolated_parts"]}
        for m in METRICS:
            meas, pred = float(r.get(m, math.nan)), float(p.get(m, math.nan))
            row[f"{m}_measured"] = meas
            row[f"{m}_predicted"] = pred
            row[f"{m}_rel_error"] = pred / meas - 1.0 if meas and meas == meas else math.nan
        notes = coverage_notes(cell, train_cells)
        mech = cell_tp_overlap(cell, r.get("tp_overlap"))
        if mech != "none" and not _host_bound_with(train, cal.cells, mech):
            notes.append(f"no host-bound cell with TP overlap {mech} calibrates its host launch cost")
        busy = row["busy_frac"]
        if busy == busy and busy < HOST_BOUND_BUSY_FRAC:
            notes.insert(0, f"host-bound: GPU kernels busy {busy:.0%} of the measured iteration")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows)


def _host_bound_with(train: MeasuredSet, cells: list[str], mech: str) -> bool:
    """Whether a host-bound training cell ran this TP overlap mechanism."""
    runs = train.runs[train.runs.cell_id.isin(set(cells)) & (train.runs["busy_frac"] < HOST_BOUND_BUSY_FRAC)]
    recorded = runs["tp_overlap"] if "tp_overlap" in runs else [None] * len(runs)
    return any(cell_tp_overlap(train.cell(c), t) == mech for c, t in zip(runs.cell_id, recorded, strict=True))


def _merge(sets: list[MeasuredSet]) -> MeasuredSet:
    return MeasuredSet(pd.concat([s.runs for s in sets], ignore_index=True),
                       pd.concat([s.kernels for s in sets], ignore_index=True),
                       pd.concat([s.gpus for s in sets], ignore_index=True),
                       {k: v for s in sets for k, v in s.dropped.items()})


def validate(folds: list[Fold], hardware: str | None = None) -> pd.DataFrame:
    """Error tables of every fold, concatenated (each source read once)."""
    sources = sorted({s for f in folds for s in (*f.train, *f.test)})
    measured = {s: load_measured([s]) for s in sources}
    frames = [validate_fold(f, hardware, measured) for f in folds]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fold_key(row: pd.Series | dict[str, Any]) -> str:
    """A configuration: the cell's ``config_id`` (repetitions share it) and its TP overlap mechanism."""
    cell = cell_from_row(dict(row))
    return f"{row.get('config_id') or cell.config_id}|{cell_tp_overlap(cell, row.get('tp_overlap'))}"


def newest_fingerprints(ms: MeasuredSet) -> dict[str, str]:
    """GPU type -> the fingerprint key of its newest engine build that names its kernels (the current engine)."""
    out: dict[str, str] = {}
    runs = ms.runs[ms.runs["attention"].fillna(UNRECORDED) != UNRECORDED]
    for hw, g in runs.groupby("hardware"):
        stamps = g.groupby("fingerprint")["recorded_at"].max().fillna("")
        out[str(hw)] = str(stamps.sort_values().index[-1])
    return out


def loco(ms: MeasuredSet, fingerprints: dict[str, str] | None = None, collectives: pd.DataFrame | None = None,
         min_configs: int = 3, coverage: float = COVERAGE) -> pd.DataFrame:
    """Leave-one-configuration-out over the cells of every (GPU type, fingerprint) with at least ``min_configs``
    configurations (``fingerprints``: only these, GPU type -> key), then the cross-fingerprint predictions.

    Returns:
        the error table (:func:`predict_cells` columns), ``fold`` = ``loco <hardware>/<key>: <configuration>`` for
        the held-out rows (``relation = match``) and ``cross <calibration> -> <hardware>/<key>`` for the others,
        with each row's band at the stated coverage from the other folds (``<metric>_band``, ``<metric>_covered``).
    """
    runs = ms.runs.copy()
    runs["fold_key"] = [fold_key(r) for _, r in runs.iterrows()]
    groups = runs.groupby(["hardware", "fingerprint"]).groups
    frames = []
    full: dict[tuple[str, str], Calibration] = {}
    for (hw, key), idx in groups.items():
        if fingerprints is not None and fingerprints.get(hw) != key:
            continue
        g = runs.loc[idx]
        pts = collectives_for(collectives, hw)
        if g["fold_key"].nunique() < min_configs:
            continue
        for fk, test in g.groupby("fold_key", sort=True):
            train = ms.subset([c for c in ms.runs.cell_id if c not in set(test.cell_id)])
            try:
                cal = calibrate(train, hw, pts, key)
            except ValueError:
                continue
            frames.append(predict_cells(f"loco {hw}/{key}: {fk}", cal, train, ms, list(test.cell_id)))
    # cross-fingerprint: every other calibration predicts this fingerprint's cells
    for hw, key in groups:
        try:
            full[(hw, key)] = calibrate(ms, hw, None, key)
        except ValueError:
            continue
    for (hw, key), idx in groups.items():
        if fingerprints is not None and fingerprints.get(hw) != key:
            continue
        for (hw2, key2), cal in full.items():
            if (hw2, key2) == (hw, key):
                continue
            rel = "foreign" if hw2 == hw else "other-gpu"
            frames.append(predict_cells(f"cross {hw2}/{key2} -> {hw}/{key}", cal, ms, ms, list(runs.loc[idx].cell_id),
                                        relation=rel))
    frames = [f for f in frames if not f.empty]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return add_bands(table, coverage) if len(table) else table


def machine_spread(ms: MeasuredSet) -> dict[str, Any]:
    """How far one configuration's iteration time moves between machines: the floor under any projection that does
    not know the machine. Per (GPU type, fingerprint), every configuration (:func:`fold_key`) measured on two or
    more physical machines (the runs' ``machine``, told apart by their GPUs' UUIDs:
    :func:`calorimeter.projection.hosts.machine_keys`) gives the ratio of its slowest to its fastest machine's mean
    iteration time; host-bound (any cell's GPUs busy < 80% of its iteration) and GPU-bound configurations are
    summarised apart, with the repetition spread within one machine beside them (the largest max/min ratio of one
    configuration's cells on one machine)."""
    if "machine" not in ms.runs.columns:
        return {}
    runs = ms.runs.assign(fold_key=[fold_key(r) for _, r in ms.runs.iterrows()]).dropna(subset=["machine"])
    out: dict[str, Any] = {}
    for (hw, fp), g in runs.groupby(["hardware", "fingerprint"]):
        rows, within = [], {"host_bound": 1.0, "gpu_bound": 1.0}
        for fk, c in g.groupby("fold_key"):
            hb = bool((c["busy_frac"] < HOST_BOUND_BUSY_FRAC).any())
            t = c.groupby("machine")["iteration_time_s"]
            kind = "host_bound" if hb else "gpu_bound"
            within[kind] = max(within[kind], float((t.max() / t.min()).max()))
            if t.ngroups >= 2:
                means = t.mean()
                rows.append({"configuration": str(fk), "host_bound": hb, "cells": len(c),
                             "machines": {str(k): float(v) for k, v in means.items()},
                             "ratio": float(means.max() / means.min())})
        summary = {}
        for kind, hb in (("host_bound", True), ("gpu_bound", False)):
            r = [x["ratio"] for x in rows if x["host_bound"] == hb]
            summary[kind] = {"configurations": len(r), "max_ratio": max(r) if r else math.nan,
                             "within_machine_max_ratio": within[kind]}
        out[f"{hw}/{fp}"] = {**summary, "configurations": rows}
    return out


def add_bands(table: pd.DataFrame, coverage: float = COVERAGE) -> pd.DataFrame:
    """Each held-out row's band per metric, from the other folds of its group (same hardware and fingerprint,
    ``relation = match``) in the row's regime (:func:`predicted_regime`: host-bound rows from host-bound rows, the
    others from the others; a GPU type with fewer than :data:`BAND_MIN_CELLS` host-bound rows adds the other GPU
    types' (its host times are fitted over GPU types: :func:`calorimeter.projection.calibration.host_bound_elsewhere`);
    all rows where a regime has still fewer): the ``coverage`` quantile of their absolute errors; and whether the row
    lies within it. A row outside its calibration's range (``extrapolated``) has that band widened by the
    calibration's cross-fingerprint error (:func:`cross_errors`,
    :func:`calorimeter.projection.model.extrapolation_band`), as a projected row has."""
    table = table.copy()
    match = table["relation"] == "match"
    regime = predicted_regime(table)
    outside = table["extrapolated"].fillna(False).astype(bool) if "extrapolated" in table else pd.Series(
        False, index=table.index)
    cross = {f"{hw}/{fp}": cross_errors(table, f"{hw}/{fp}", coverage)
             for hw, fp in table.loc[match, ["hardware", "fingerprint"]].drop_duplicates().itertuples(index=False)}
    for m in METRICS:
        table[f"{m}_band"] = math.nan
        table[f"{m}_covered"] = pd.NA
        for (hw, fp), g in table[match].groupby(["hardware", "fingerprint"]):
            elsewhere = table.loc[match & regime & (table["hardware"] != hw), f"{m}_rel_error"].abs().dropna()
            widen = cross[f"{hw}/{fp}"].get(m, math.nan)
            for (fold, hb), h in g.groupby([g["fold"], regime[g.index]]):
                e = g.loc[g["fold"] != fold, f"{m}_rel_error"].abs().dropna()
                others = band_sample(e, regime[e.index] == hb, elsewhere if hb else None)
                if len(others) < 3:
                    continue
                band = float(np.quantile(others, coverage))
                bands = pd.Series(band, index=h.index).where(~outside[h.index], extrapolation_band(band, widen))
                table.loc[h.index, f"{m}_band"] = bands
                err = h[f"{m}_rel_error"].abs()
                table.loc[h.index, f"{m}_covered"] = [bool(e <= b) if e == e and b == b else pd.NA
                                                      for e, b in zip(err, bands, strict=True)]
    return table


def cross_errors(table: pd.DataFrame, key: str, coverage: float = COVERAGE) -> dict[str, float]:
    """A calibration's measured error on cells it never saw the like of: per metric, the ``coverage`` quantile of its
    absolute errors on another fingerprint's or GPU type's cells (``relation != match`` rows it predicted)."""
    if "calibration" not in table:
        return {}
    cross = table[(table["relation"] != "match") & (table["calibration"] == key)]
    return {m: float(np.quantile(e, coverage)) for m in METRICS if len(e := cross[f"{m}_rel_error"].abs().dropna())}


def band_sample(errors: pd.Series, same_regime: pd.Series, elsewhere: pd.Series | None = None) -> pd.Series:
    """The absolute errors a band is the quantile of: those of the row's regime (``same_regime``), joined by
    ``elsewhere`` (the other GPU types' host-bound errors, for a host-bound row: host times are fitted over GPU types,
    so is their band) while the regime has fewer than :data:`BAND_MIN_CELLS`; every error where it still has."""
    same = errors[same_regime]
    if elsewhere is not None and len(same) < BAND_MIN_CELLS <= len(same) + len(elsewhere):
        same = pd.concat([same, elsewhere])
    return same if len(same) >= BAND_MIN_CELLS else errors


def predicted_regime(table: pd.DataFrame) -> pd.Series:
    """Whether the projection called each row host-bound (``predicted_host_bound``; the regime a projected row's band
    is chosen by, as the measured busy share is unknown when projecting)."""
    if "predicted_host_bound" not in table:
        return pd.Series(False, index=table.index)
    return table["predicted_host_bound"].fillna(False).astype(bool)


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """Per fold and metric: cells, median / largest absolute and mean signed relative error over all held-out cells
    and over the GPU-bound ones (host-bound cells flagged, kept); band coverage where bands exist; the cells above
    :data:`TARGET_MAX` with their notes."""
    out: dict[str, Any] = {}
    for fold, t in table.groupby("fold", sort=False):
        out[str(fold)] = _stats(t)
    return out


def repetition_means(t: pd.DataFrame) -> pd.DataFrame:
    """One row per held-out configuration on one machine (its fold and the runs' ``machine``): measured and predicted
    values averaged over its repetitions, the relative errors of the averages. The unit of a projection: it predicts
    what a configuration does on a machine, not one run of it; in the host-bound regime one configuration's runs on
    one machine differ by up to 1.30x (results/reference/hostbound-2026-11-27, hostprobe-2026-11-27), which no
    projection made before the run can follow. ``runs``: the repetitions averaged; host-bound and extrapolated where
    any of them was."""
    if t.empty:
        return t
    g = t.assign(machine=t["machine"].fillna("?") if "machine" in t else "?")
    rows = []
    for (fold, machine), r in g.groupby(["fold", "machine"], sort=True):
        row: dict[str, Any] = {"fold": fold, "machine": machine, "runs": len(r),
                               "notes": "host-bound" if _host_bound(r).any() else "",
                               "extrapolated": bool(r["extrapolated"].fillna(False).astype(bool).any())
                               if "extrapolated" in r else False}
        for m in METRICS:
            meas, pred = r[f"{m}_measured"].mean(), r[f"{m}_predicted"].mean()
            row[f"{m}_rel_error"] = pred / meas - 1.0 if meas == meas and meas > 0 and pred == pred else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def run_spread(t: pd.DataFrame, metric: str = "tokens_per_s_per_gpu", target: float = TARGET_MAX,
               draws: int = 20000) -> dict[str, Any]:
    """How far single runs stray from their configuration's mean on their machine, per regime (measured host-bound or
    not), and what that leaves of the max target: the pooled standard deviation of log ``metric`` about each
    (configuration, machine) mean over the groups with repetitions (``dof`` = runs - groups), its 90% interval
    (chi-square), and the probability that a prediction exact for every configuration on every machine still stays
    within ``target`` of every run (normal run effects, ``draws`` simulated sets of as many runs as the regime has;
    fixed seed), at the estimate and at both ends of its interval. A max target a perfect projection would miss is
    not a target a projection can meet (2026-11-27: host-bound H200 runs, SD 7.8%)."""
    from scipy.stats import chi2  # heavy: only the validation summary needs it

    out: dict[str, Any] = {}
    if t.empty:
        return out
    rng = np.random.default_rng(0)
    machine = t["machine"].fillna("?") if "machine" in t else pd.Series("?", index=t.index)
    for name, sel in (("host_bound", _host_bound(t)), ("gpu_bound", ~_host_bound(t))):
        g = t[sel].assign(_m=machine[sel], _y=np.log(t.loc[sel, f"{metric}_measured"]))
        res, dof = [], 0
        for _, x in g.dropna(subset=["_y"]).groupby(["fold", "_m"]):
            if len(x) >= 2:
                res.extend(x["_y"] - x["_y"].mean())
                dof += len(x) - 1
        if dof < 2:
            continue
        sd = float(np.sqrt(np.sum(np.square(res)) / dof))
        lo, hi = sd * math.sqrt(dof / chi2.ppf(0.95, dof)), sd * math.sqrt(dof / chi2.ppf(0.05, dof))
        n = int(g["_y"].notna().sum())
        p_met = {}
        for k, v in (("sd", sd), ("sd_low", lo), ("sd_high", hi)):
            e = rng.normal(0.0, v, (draws, n))  # a run's log deviation: within target is e in [ln(1-t), ln(1+t)]
            p_met[k] = float(((e <= math.log1p(target)) & (e >= math.log1p(-target))).all(axis=1).mean())
        out[name] = {"runs": n, "groups_repeated": int(len(res) - dof), "dof": dof, "sd_log": sd,
                     "sd_log_90": [lo, hi], "p_max_within_target": p_met}
    return out


def _errors(t: pd.DataFrame, m: str, suffix: str) -> dict[str, float]:
    e = t[f"{m}_rel_error"].dropna()
    return {f"median_abs{suffix}": _q(e.abs(), 0.5), f"max_abs{suffix}": float(e.abs().max()) if len(e) else math.nan,
            f"mean_signed{suffix}": float(e.mean()) if len(e) else math.nan, f"cells{suffix}": len(e)}


def _in_range(t: pd.DataFrame) -> pd.Series:
    return ~t["extrapolated"].fillna(False).astype(bool) if "extrapolated" in t else pd.Series(True, index=t.index)


def _stats(t: pd.DataFrame) -> dict[str, Any]:
    """Per metric: median / largest absolute and mean signed relative error over every held-out cell (run), over the
    GPU-bound ones (suffix ``_gpu_bound``), over those inside the calibration's range (``_in_range``: not
    extrapolated) and over configurations on a machine with their repetitions averaged (``_per_machine``,
    :func:`repetition_means`)."""
    gpu_bound, in_range, means = t[~_host_bound(t)], t[_in_range(t)], repetition_means(t)
    f: dict[str, Any] = {"cells": len(t), "gpu_bound_cells": len(gpu_bound), "in_range_cells": len(in_range),
                         "configurations_on_machines": len(means)}
    for m in METRICS:
        f[m] = {**_errors(t, m, ""), **_errors(gpu_bound, m, "_gpu_bound"), **_errors(in_range, m, "_in_range"),
                **_errors(means, m, "_per_machine")}
        if f"{m}_covered" in t:
            cov = t[f"{m}_covered"].dropna()
            f[m]["coverage"] = float(cov.astype(bool).mean()) if len(cov) else math.nan
            f[m]["band_median"] = _q(t[f"{m}_band"].dropna(), 0.5)
            hb = predicted_regime(t)[cov.index]
            for name, sel in (("host_bound", hb), ("gpu_bound", ~hb)):
                f[m][f"coverage_{name}"] = float(cov[sel].astype(bool).mean()) if sel.any() else math.nan
                f[m][f"cells_{name}"] = int(sel.sum())
    worst = t[(t["tokens_per_s_per_gpu_rel_error"].abs() > TARGET_MAX)
              | (t["energy_per_token_j_rel_error"].abs() > TARGET_MAX)]
    f["over_max"] = [{"cell_id": r.cell_id, "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu_rel_error),
                      "energy_per_token": float(r.energy_per_token_j_rel_error), "notes": r.notes}
                     for r in worst.itertuples()]
    return f


def _q(e: pd.Series, q: float) -> float:
    return float(np.quantile(e, q)) if len(e) else math.nan


def loco_summary(table: pd.DataFrame, coverage: float = COVERAGE) -> dict[str, Any]:
    """The validation.json of the leave-one-configuration-out design: per (GPU type, fingerprint) the pooled
    statistics over its held-out cells (all, and GPU-bound) and the targets, per fold the same, and the measured
    cross-fingerprint errors (the ``coverage`` quantile of the absolute errors of each other calibration)."""
    out: dict[str, Any] = {"coverage_stated": coverage, "targets": {
        "median_abs": TARGET_MEDIAN, "max_abs": TARGET_MAX, "mean_signed": TARGET_MEAN_SIGNED,
        "coverage": coverage}, "groups": {}, "cross_fingerprint": {}}
    if table.empty:
        return out
    match = table[table["relation"] == "match"]
    for (hw, fp), g in match.groupby(["hardware", "fingerprint"]):
        pooled = _stats(g)
        pooled["folds"] = int(g["fold"].nunique())
        pooled["sources"] = sorted(set(g["source"]))
        pooled["targets_met"] = targets_met(pooled, coverage)
        pooled["targets_met_gpu_bound"] = targets_met(pooled, coverage, suffix="_gpu_bound")
        pooled["targets_met_in_range"] = targets_met(pooled, coverage, suffix="_in_range")
        pooled["targets_met_per_machine"] = targets_met(pooled, coverage, suffix="_per_machine")
        pooled["run_spread"] = run_spread(g)
        pooled["per_fold"] = {str(k): _fold_row(v) for k, v in g.groupby("fold", sort=True)}
        out["groups"][f"{hw}/{fp}"] = pooled
    for fold, g in table[table["relation"] != "match"].groupby("fold"):
        out["cross_fingerprint"][str(fold)] = {
            "cells": len(g), "calibration": str(g["calibration"].iloc[0]), "relation": str(g["relation"].iloc[0]),
            **{m: {"quantile_abs": _q(g[f"{m}_rel_error"].abs().dropna(), coverage),
                   "median_abs": _q(g[f"{m}_rel_error"].abs().dropna(), 0.5),
                   "mean_signed": float(g[f"{m}_rel_error"].mean())} for m in METRICS}}
    return out


def _fold_row(g: pd.DataFrame) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": len(g), "host_bound": bool(_host_bound(g).any())}
    for m in METRICS:
        e = g[f"{m}_rel_error"]
        row[m] = {"mean_signed": float(e.mean()) if e.notna().any() else math.nan,
                  "max_abs": float(e.abs().max()) if e.notna().any() else math.nan,
                  "band": float(g[f"{m}_band"].iloc[0]) if f"{m}_band" in g else math.nan,
                  "covered": (float(g[f"{m}_covered"].dropna().astype(bool).mean())
                              if f"{m}_covered" in g and g[f"{m}_covered"].notna().any() else math.nan)}
    row["notes"] = sorted({n for n in g["notes"] if n})
    return row


def targets_met(stats: dict[str, Any], coverage: float = COVERAGE, suffix: str = "") -> dict[str, bool]:
    """Each target against pooled statistics (``suffix``: ``_gpu_bound`` for the GPU-bound cells, ``_in_range``
    for those inside the calibration's range, ``_per_machine`` for configurations on a machine, repetitions
    averaged: :func:`_stats`; the coverage is checked over every cell only)."""
    res = {f"median_abs {m}": bool(stats[m][f"median_abs{suffix}"] <= v) for m, v in TARGET_MEDIAN.items()}
    res["max_abs"] = all(not (stats[m][f"max_abs{suffix}"] > TARGET_MAX) for m in TARGET_MEDIAN)
    res["mean_signed"] = all(not (abs(stats[m][f"mean_signed{suffix}"]) > TARGET_MEAN_SIGNED) for m in TARGET_MEDIAN)
    if not suffix:  # over all rows, and in each regime the bands are chosen by
        res["coverage"] = all(coverage_met(stats[m].get("coverage", math.nan), stats[m]["cells"], coverage)
                              and all(coverage_met(stats[m].get(f"coverage_{r}", math.nan),
                                                   stats[m].get(f"cells_{r}", 0), coverage)
                                      for r in ("host_bound", "gpu_bound"))
                              for m in METRICS)
    return res


def coverage_met(measured: float, cells: int, stated: float = COVERAGE) -> bool:
    """Whether a measured band coverage is consistent with the stated one: not below it by more than the one-sided
    95% sampling allowance of a share over ``cells`` held-out cells (``1.645 sqrt(p (1 - p) / n)``: 8 points for 38
    cells, 22 for 5). No cells: nothing to contradict it."""
    if measured != measured or cells <= 0:
        return True
    return measured >= stated - 1.645 * math.sqrt(stated * (1.0 - stated) / cells)


def _host_bound(t: pd.DataFrame) -> pd.Series:
    return t["notes"].fillna("").str.startswith("host-bound")


def error_band(table: pd.DataFrame, quantile: float = COVERAGE, host_bound: bool | None = None,
               elsewhere: pd.DataFrame | None = None) -> dict[str, float]:
    """Relative half-width of the projection's error band per metric: this quantile of the held-out absolute
    errors (``relation = match`` rows where the column exists); ``host_bound``: only the rows the projection called
    host-bound (True) or not (False), all rows where those are fewer than :data:`BAND_MIN_CELLS`; ``elsewhere``: the
    other GPU types' rows, whose host-bound ones join too few host-bound rows (as in :func:`add_bands`)."""
    if table.empty:
        return {}
    t = table[table["relation"] == "match"] if "relation" in table else table
    other = None
    if host_bound and elsewhere is not None:
        other = elsewhere[(elsewhere["relation"] == "match") & predicted_regime(elsewhere)]
    band = {}
    for m in METRICS:
        e = t[f"{m}_rel_error"].abs().dropna()
        if host_bound is not None:
            e = band_sample(e, predicted_regime(t)[e.index] == host_bound,
                            other[f"{m}_rel_error"].abs().dropna() if other is not None else None)
        if len(e):
            band[m] = float(np.quantile(e, quantile))
    return band


def apply_validation(cals: dict[str, Calibration], table: pd.DataFrame, coverage: float = COVERAGE) -> None:
    """Store the validation's findings in the calibrations (in place): each one's error bands (the ``coverage``
    quantile of its own held-out absolute errors, apart for the rows it called host-bound and the others), the
    coverage stated and measured on held-out cells, and its cross-fingerprint error (the same quantile of its errors
    on other fingerprints' and GPU types' cells)."""
    if table.empty:
        return
    for key, cal in cals.items():
        hw, fp = key.split("/", 1)
        own = table[(table["relation"] == "match") & (table["hardware"] == hw) & (table["fingerprint"] == fp)]
        cal.error_band = error_band(own, coverage, host_bound=False)
        cal.error_band_host_bound = error_band(own, coverage, host_bound=True,
                                               elsewhere=table[table["hardware"] != hw])
        cal.coverage = {"stated": coverage}
        for m in METRICS:
            cov = own[f"{m}_covered"].dropna() if f"{m}_covered" in own else pd.Series(dtype=bool)
            if len(cov):
                cal.coverage[m] = float(cov.astype(bool).mean())
        cal.cross_fingerprint_error = cross_errors(table, key, coverage)


def write_validation(table: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, table)
    write_atomic(out.with_suffix(".csv"), lambda tmp: table.to_csv(tmp, index=False))
