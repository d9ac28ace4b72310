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
from calorimeter.projection.calibration import (
    Calibration,
    calibrate,
    cell_tp_overlap,
    collectives_for,
    machine_of,
    range_values,
)
from calorimeter.projection.catalogue import Fold
from calorimeter.projection.fingerprint import UNRECORDED
from calorimeter.projection.measured import HOST_BOUND_BUSY_FRAC, MeasuredSet, cell_from_row, load_measured
from calorimeter.projection.model import Projector
from calorimeter.projection.regimes import (
    BASE_REGIMES,
    BEYOND_COLUMNS,
    EXTRAPOLATIONS,
    GPU_BOUND,
    GPU_COUNT,
    HOST_BOUND,
    MICRO_BATCH,
    MIN_REGIME_ROWS,
    MODEL_SIZE,
    MOE,
    MOE_UNSEEN,
    SEQUENCE,
    RegimeBand,
    band_key,
    choose_band,
    engine_own,
    regime_from_columns,
)
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
#: the fewest held-out cells of a dense base regime (GPU-bound or host-bound, as projected) its own band is built from
#: (fewer: pooled, :func:`regime_bands`)
BAND_MIN_CELLS = 10
#: the kinds of fold a validation table's rows come from: ``loco`` (one configuration held out), ``fold`` (the
#: configured folds of sweep folders), ``scale`` (every cell at one value of a range key predicted from the cells
#: below it: :data:`SCALE_KEYS`), ``moe-from-dense`` (an engine's MoE cells from its dense ones), ``cross`` (another
#: engine's or GPU type's calibration predicting the current cells), ``cross-moe`` (the current calibration predicting
#: another engine's MoE cells)
DESIGNS: tuple[str, ...] = ("loco", "fold", "scale", "moe-from-dense", "cross", "cross-moe")
#: the designs whose rows make and check the regimes' bands (the held-out configurations of an engine and its
#: extrapolation folds); ``HELD_OUT`` make the base regimes' bands and the targets
BANDING: tuple[str, ...] = ("loco", "fold", "scale", "moe-from-dense")
HELD_OUT: tuple[str, ...] = ("loco", "fold")
#: the extrapolation folds: range key -> the regime its held-out rows are in
SCALE_KEYS: dict[str, str] = {"world_size": GPU_COUNT, "seq_len": SEQUENCE, "micro_batch": MICRO_BATCH,
                              "model_params": MODEL_SIZE}
#: work counts whose calibration range is checked (per micro-batch; the optimizer per iteration): a held-out cell
#: beyond RANGE_FACTOR x the largest training value gets a note (its time there extrapolates the fitted rate)
RANGE_FEATURES: tuple[str, ...] = ("dense_flops", "act_elems", "head_elems", "z3_elems", "optim_elems", "moe_elems")
RANGE_FACTOR = 1.5


def feature_tops(train: list[Cell]) -> dict[str, float]:
    """The largest value of every :data:`RANGE_FEATURES` work count over the training cells' stages."""
    top: dict[str, float] = {}
    for c in train:
        for st in workload(c).stages:
            for f in RANGE_FEATURES:
                top[f] = max(top.get(f, 0.0), _range_value(st, f))
    return top


def coverage_notes(cell: Cell, train: list[Cell], top: dict[str, float] | None = None) -> list[str]:
    """What about ``cell`` no training cell has: the model must extrapolate there (``top``: :func:`feature_tops` of
    ``train``, when already computed)."""
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
        largest = max(getattr(c, name) for c in train)
        if v > largest:
            notes.append(f"{name}={v} above the largest measured ({largest})")
    if cell.recompute not in {c.recompute for c in train}:
        notes.append(f"recompute={cell.recompute} never measured")
    if cell.zero_stage == 3 and cell.tp > 1 and not any(c.zero_stage == 3 and c.tp > 1 for c in train):
        notes.append("tp x ZeRO-3 never measured")
    top = top if top is not None else feature_tops(train)
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
        frames.append(predict_cells(fold.name, cal, train, test, list(test.runs.cell_id[test.runs.hardware == hw]),
                                    design="fold"))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def predict_cells(fold: str, cal: Calibration, train: MeasuredSet, test: MeasuredSet, cell_ids: list[str],
                  relation: str = "match", design: str = "loco") -> pd.DataFrame:
    """One error row per held-out cell of ``test``, predicted with ``cal`` (fitted on ``train``); ``design``: which
    kind of fold (:data:`DESIGNS`). Every row is predicted, in every regime (the errors are what the regimes' bands
    are made of: nothing is refused here).

    Raises:
        ValueError: a design not in :data:`DESIGNS`.
    """
    if design not in DESIGNS:
        raise ValueError(f"design {design!r} is not one of {list(DESIGNS)}")
    proj = Projector(cal, relation=relation, refuse=False)
    train_cells = [train.cell(c) for c in cal.cells if c in set(train.runs.cell_id)]
    tops = feature_tops(train_cells)
    cols = [c for c in ("cell_id", "config_id", "fingerprint", "source", "busy_frac", "tp_overlap", "machine",
                        *METRICS) if c in test.runs]
    recs = test.runs.loc[test.runs["cell_id"].isin(set(cell_ids)), cols].set_index("cell_id", drop=False).to_dict(
        "index")
    rows = []
    for cid in cell_ids:
        r = recs[cid]
        cell = test.cell(cid)
        p = proj.project(cell, machine_of(r))
        row: dict[str, Any] = {"fold": fold, "design": design, "cell_id": cid,
                               "config_id": r.get("config_id", cell.config_id), "configuration": fold_key(r, cell),
                               "hardware": cell.hardware, "fingerprint": r.get("fingerprint", ""),
                               "calibration": cal.key, "relation": relation, "source": r.get("source", ""),
                               "model": cell.model, "world_size": cell.world_size,
                               "parallel_label": cell.parallel_label, "recompute": cell.recompute,
                               "zero_stage": cell.zero_stage, "busy_frac": float(r.get("busy_frac", math.nan)),
                               "calibration_cells": len(cal.cells), "predicted_host_bound": p["host_bound"],
                               "machine": p["machine"], "host_factor": p["host_factor"],
                               "extrapolated": p["extrapolated"], "extrapolated_parts": p["extrapolated_parts"],
                               **{k: p[k] for k in ("regime", *BEYOND_COLUMNS.values())}}
        for m in METRICS:
            meas, pred = float(r.get(m, math.nan)), float(p.get(m, math.nan))
            row[f"{m}_measured"] = meas
            row[f"{m}_predicted"] = pred
            row[f"{m}_rel_error"] = pred / meas - 1.0 if meas and meas == meas else math.nan
        notes = coverage_notes(cell, train_cells, tops)
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


def fold_key(row: pd.Series | dict[str, Any], cell: Cell | None = None) -> str:
    """A configuration: the cell's ``config_id`` (repetitions share it) and its TP overlap mechanism (``cell``: the
    row's cell, when already built)."""
    cell = cell if cell is not None else cell_from_row(dict(row))
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
         min_configs: int = 3, coverage: float = COVERAGE, extrapolation: bool = True) -> pd.DataFrame:
    """Leave-one-configuration-out over the cells of every (GPU type, fingerprint) with at least ``min_configs``
    configurations (``fingerprints``: only these, GPU type -> key, unless ``extrapolation``); with ``extrapolation``,
    the extrapolation folds of every fingerprint (:func:`scale_folds`, :func:`moe_from_dense`); then the
    cross-fingerprint predictions of the ``fingerprints``' cells.

    Returns:
        the error table (:func:`predict_cells` columns), ``fold`` = ``loco <hardware>/<key>: <configuration>`` for
        the held-out rows (``design = loco``, ``relation = match``), ``scale ...`` and ``moe-from-dense ...`` for the
        extrapolation folds, ``cross <calibration> -> <hardware>/<key>`` for the others, with each banded row's band
        at the stated coverage from the other folds (``<metric>_band``, ``<metric>_covered``: :func:`add_bands`).
    """
    runs = ms.runs.copy()
    runs["fold_key"] = [fold_key(r) for _, r in runs.iterrows()]
    groups = runs.groupby(["hardware", "fingerprint"]).groups
    frames = []
    full: dict[tuple[str, str], Calibration] = {}
    for (hw, key), idx in groups.items():
        # the targets' held-out configurations; with the extrapolation folds, every engine's (the base bands its
        # extrapolation rows are checked with)
        if fingerprints is not None and fingerprints.get(hw) != key and not extrapolation:
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
    if extrapolation:
        frames += scale_folds(ms, runs, collectives, min_configs) + moe_from_dense(ms, runs, collectives)
    # cross-fingerprint: every other calibration predicts this fingerprint's cells
    for hw, key in groups:
        try:
            full[(hw, key)] = calibrate(ms, hw, collectives_for(collectives, hw), key)
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
                                        relation=rel, design="cross"))
            # and this fingerprint's calibration on the other one's MoE cells (the MoE error across engines)
            if (hw, key) in full and extrapolation:
                moe = [c for c in runs.loc[groups[(hw2, key2)]].cell_id if range_values(ms.cell(c))["experts"] > 0]
                if moe:
                    frames.append(predict_cells(f"cross {hw}/{key} -> {hw2}/{key2} MoE", full[(hw, key)], ms, ms,
                                                moe, relation="foreign" if hw2 == hw else "other-gpu",
                                                design="cross-moe"))
    frames = [f for f in frames if not f.empty]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return add_bands(table, coverage) if len(table) else table


def scale_folds(ms: MeasuredSet, runs: pd.DataFrame, collectives: pd.DataFrame | None = None, min_configs: int = 3
                ) -> list[pd.DataFrame]:
    """The extrapolation folds: for every (GPU type, fingerprint) with ``min_configs`` configurations and every range
    key of :data:`SCALE_KEYS`, every value above its smallest: the fingerprint's cells at that value predicted from a
    calibration on every cell of its GPU type below it (and every other GPU type's cell). Their rows measure the
    error of the regime they land in (:func:`calorimeter.projection.regimes.regime_of`: beyond the range in GPU count,
    sequence, micro-batch or model size, or a layout never measured), one doubling or so beyond, as a projection
    beyond its calibration is."""
    values = pd.DataFrame([range_values(ms.cell(c)) for c in runs.cell_id], index=runs.index)
    frames = []
    for (hw, key), g in runs.groupby(["hardware", "fingerprint"]):
        if g["fold_key"].nunique() < min_configs:
            continue
        pts = collectives_for(collectives, hw)
        for col in SCALE_KEYS:
            mine = values.loc[g.index, col]
            for v in sorted(set(mine))[1:]:
                # this GPU type's cells below the value, every other GPU type's cell (as a calibration of this GPU
                # type has them: host times are fitted over GPU types that ran the same software)
                train = ms.subset(list(runs.cell_id[(values[col] < v) | (runs["hardware"] != hw)]))
                try:
                    cal = calibrate(train, hw, pts, key)
                except ValueError:
                    continue
                frames.append(predict_cells(f"scale {hw}/{key}: {col} {v:.4g} from below", cal, train, ms,
                                            list(g.cell_id[mine == v]), design="scale"))
    return frames


def moe_from_dense(ms: MeasuredSet, runs: pd.DataFrame, collectives: pd.DataFrame | None = None
                   ) -> list[pd.DataFrame]:
    """For every (GPU type, fingerprint) with MoE and dense cells: its MoE cells predicted from a calibration on every
    dense cell: the error of a MoE row whose calibration never saw MoE, measured within one engine."""
    moe = pd.Series([range_values(ms.cell(c))["experts"] > 0 for c in runs.cell_id], index=runs.index)
    frames = []
    for (hw, key), g in runs.groupby(["hardware", "fingerprint"]):
        if not moe[g.index].any() or moe[g.index].all():
            continue
        train = ms.subset(list(runs.cell_id[~moe]))
        try:
            cal = calibrate(train, hw, collectives_for(collectives, hw), key)
        except ValueError:
            continue
        frames.append(predict_cells(f"moe-from-dense {hw}/{key}", cal, train, ms, list(g.cell_id[moe[g.index]]),
                                    design="moe-from-dense"))
    return frames


def machine_spread(ms: MeasuredSet) -> dict[str, Any]:
    """How far one configuration's iteration time moves between machines: the floor under any projection that does
    not know the machine. Per (GPU type, fingerprint), every configuration (:func:`fold_key`) measured on two or
    more physical machines (the runs' ``machine``, told apart by their GPUs' UUIDs:
    :func:`calorimeter.records.machines.machine_keys`) gives the ratio of its slowest to its fastest machine's mean
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


def _design(t: pd.DataFrame) -> pd.Series:
    """Each row's design (:data:`DESIGNS`; a table without the column: held-out configurations)."""
    return t["design"] if "design" in t else pd.Series("loco", index=t.index)


def row_regimes(t: pd.DataFrame) -> pd.Series:
    """Each row's regimes (a list, the base first; a table without a ``regime`` column: dense host-bound where the
    projection called it host-bound, else dense GPU-bound)."""
    if "regime" in t:
        return t["regime"].fillna(GPU_BOUND).astype(str).str.split("; ")
    hb = t["predicted_host_bound"].fillna(False).astype(bool) if "predicted_host_bound" in t else pd.Series(
        False, index=t.index)
    return hb.map(lambda h: [HOST_BOUND if h else GPU_BOUND])


@dataclass
class BandRows:
    """The banded rows of a validation table (``design`` in :data:`BANDING`, ``relation = match``) as arrays, with
    what :func:`regime_bands` reads: engine, design, fold, configuration, base regime, whether in range, per
    extrapolation whether the row lies outside the range in that way (``has``) and in that way alone (``pure``),
    the absolute errors per metric, how far beyond the range per extrapolation."""

    index: pd.Index
    cols: dict[str, np.ndarray]
    has: dict[str, np.ndarray]
    pure: dict[str, np.ndarray]
    errs: dict[str, np.ndarray]
    beyond: dict[str, np.ndarray]

    @classmethod
    def of(cls, table: pd.DataFrame) -> BandRows:
        """From a validation table."""
        t = table[table["relation"].eq("match") & _design(table).isin(BANDING)]
        regimes = list(row_regimes(t))
        extra = [tuple(r[1:]) for r in regimes]
        design = _design(t).to_numpy(dtype=object)
        conf = t["configuration"] if "configuration" in t else t["cell_id"]
        engine = (t["hardware"].astype(str) + "/" + t["fingerprint"].astype(str)).to_numpy(dtype=object)
        cols = {"hardware": t["hardware"].to_numpy(dtype=object),
                "fingerprint": t["fingerprint"].to_numpy(dtype=object), "design": design,
                "fold": t["fold"].to_numpy(dtype=object), "configuration": conf.to_numpy(dtype=object),
                "base": np.array([r[0] for r in regimes], dtype=object),
                "in_range": np.array([not e for e in extra], dtype=bool), "source": engine + " " + design}
        return cls(t.index, cols, {x: np.array([x in e for e in extra], dtype=bool) for x in EXTRAPOLATIONS},
                   {x: np.array([e == (x,) for e in extra], dtype=bool) for x in EXTRAPOLATIONS},
                   {m: t[f"{m}_rel_error"].abs().to_numpy(dtype=float) for m in METRICS},
                   {c: t[c].to_numpy(dtype=float) for c in BEYOND_COLUMNS.values() if c in t})


def _regime_band(rows: BandRows, sel: np.ndarray, coverage: float, min_rows: int, label: str, pure: bool = True
                 ) -> RegimeBand:
    """One regime's band from the selected rows: per metric the ``coverage`` quantile of their absolute errors (a
    metric with fewer than ``min_rows`` errors: none); with fewer rows than that: no band, and why."""
    n = int(sel.sum())
    srcs = sorted(set(rows.cols["source"][sel]))
    if n < min_rows:
        return RegimeBand(rows=n, sources=srcs, reason=f"{n} held-out rows measured in this regime (fewer than "
                                                       f"{min_rows})")
    band = {}
    for m in METRICS:
        e = rows.errs[m][sel]
        e = e[np.isfinite(e)]
        if len(e) >= min_rows:
            band[m] = float(np.quantile(e, coverage))
    col = BEYOND_COLUMNS.get(label)
    f = rows.beyond[col][sel] if col in rows.beyond else np.array([])
    f = f[f > 1.0]
    return RegimeBand(band, n, float(np.median(f)) if len(f) else math.nan, srcs, pure=pure)


def regime_bands(table: pd.DataFrame, hw: str, fp: str, coverage: float = COVERAGE, keep: np.ndarray | None = None,
                 rows: BandRows | None = None, moe_reason: str | None = None) -> dict[str, RegimeBand]:
    """The band of every regime (:func:`~calorimeter.projection.regimes.band_key`) for a calibration of
    ``hw``/``fp``, from the table's banded rows (``rows``: :class:`BandRows` of the table, when already built;
    ``keep``: only these of them; ``moe_reason``: :func:`moe_unseen_reason`, when already built).

    The base regimes from this engine's held-out configurations inside their calibration's range: dense host-bound
    with the other GPU types' host-bound rows while it has fewer than :data:`BAND_MIN_CELLS` (host times are fitted
    over GPU types that ran the same software), a dense regime with still fewer from every in-range dense row of this
    engine; MoE from this engine's MoE rows alone (:data:`MIN_REGIME_ROWS`, else refused). An extrapolation within a
    base regime from the rows of that base regime outside the range in that way alone (``pure``), else in that way
    among others: this engine's where it has :data:`MIN_REGIME_ROWS`, else every engine's and GPU type's (they
    measure the model's structure; MoE's only this engine's: :func:`~calorimeter.projection.regimes.engine_own`); a
    dense one with too few such rows from both dense bases together. ``MoE never calibrated`` is always refused, with
    what was measured (:func:`moe_unseen_reason`)."""
    rows = rows if rows is not None else BandRows.of(table)
    c = rows.cols
    keep = keep if keep is not None else np.ones(len(rows.index), dtype=bool)
    base, in_range = c["base"], c["in_range"] & keep
    own = keep & (c["hardware"] == hw) & (c["fingerprint"] == fp)
    held = np.isin(c["design"], HELD_OUT)
    dense = base != MOE
    out: dict[str, RegimeBand] = {}
    for b in BASE_REGIMES:
        sel = own & held & in_range & (base == b)
        if b == HOST_BOUND and sel.sum() < BAND_MIN_CELLS:
            sel = sel | (held & in_range & (base == b) & (c["hardware"] != hw))
        if b != MOE and sel.sum() < BAND_MIN_CELLS:
            sel = own & held & in_range & dense
        out[b] = _regime_band(rows, sel, coverage, BAND_MIN_CELLS if b != MOE else MIN_REGIME_ROWS, b)
        scopes = [own] if engine_own(b) else [own, keep]
        for x in EXTRAPOLATIONS:
            tries = [(scope & (base == b) & which, i == 0) for scope in scopes
                     for i, which in enumerate((rows.pure[x], rows.has[x]))]
            if b != MOE:
                tries += [(keep & dense & which, i == 0) for i, which in enumerate((rows.pure[x], rows.has[x]))]
            for sel_x, is_pure in tries:
                rb = _regime_band(rows, sel_x, coverage, MIN_REGIME_ROWS, x, pure=is_pure)
                if rb.band:
                    break
            out[band_key(b, x)] = rb
    out[MOE_UNSEEN] = RegimeBand(reason=moe_reason if moe_reason is not None else
                                 moe_unseen_reason(table, f"{hw}/{fp}", coverage))
    return out


def moe_unseen_reason(table: pd.DataFrame, key: str, coverage: float = COVERAGE) -> str:
    """Why a MoE row of a calibration without MoE cells is refused, with what was measured: the errors of every
    engine's calibration without its MoE cells on them (``moe-from-dense``) and of calibration ``key`` on another
    engine's MoE cells (``cross-moe``), tokens/s."""
    parts = ["no MoE cell of this engine in the calibration, and MoE's cost is the engine's own (routing, dispatch, "
             "expert loop, gradient path): an error measured on another engine's MoE cells bounds none of its rows"]
    d = _design(table)
    for rows, what in ((table[d == "moe-from-dense"], "a calibration of that engine without its MoE cells"),
                       (table[(d == "cross-moe") & (table["calibration"] == key)] if "calibration" in table
                        else table.iloc[:0], "this calibration")):
        e = rows["tokens_per_s_per_gpu_rel_error"].dropna()
        if len(e):
            engines = ", ".join(sorted({f"{h}/{f}" for h, f in zip(rows["hardware"], rows["fingerprint"],
                                                                     strict=True)}))
            parts.append(f"on the {len(e)} MoE cells of {engines}, {what} erred {e.min():+.0%} to {e.max():+.0%} "
                         f"in tokens/s ({coverage:.0%} of |error| within {np.quantile(e.abs(), coverage):.0%})")
    return "; ".join(parts) + "; measure a MoE calibration set of this engine"


def machine_floor(table: pd.DataFrame, hw: str, fp: str, coverage: float = COVERAGE) -> dict[str, dict[str, float]]:
    """Per base regime and metric, the spread between machines a projection that cannot tell them apart carries:
    the ``coverage`` quantile of each machine's mean (over its repetitions) relative to the geometric mean of the
    machines', over every configuration of this engine measured on two or more machines (told apart by their GPUs'
    UUIDs: the runs' ``machine``); a regime with fewer than 3 such configurations pools every engine's."""
    sel = table["relation"].eq("match") & _design(table).isin(HELD_OUT) & table["machine"].fillna("").ne("")
    t = table[sel]
    base = row_regimes(t).str[0]
    out: dict[str, dict[str, float]] = {}
    for b in BASE_REGIMES:
        own = t[(base == b) & (t["hardware"] == hw) & (t["fingerprint"] == fp)]
        devs, configs = _machine_devs(own)
        if configs < 3:
            devs, configs = _machine_devs(t[base == b])
        if configs >= 3:
            out[b] = {m: float(np.quantile(v, coverage)) for m, v in devs.items() if v}
    return out


def _machine_devs(t: pd.DataFrame) -> tuple[dict[str, list[float]], int]:
    """Per metric, each machine's mean over the machines' geometric mean minus 1, absolute, over the configurations
    measured on two or more machines; and how many there are."""
    devs: dict[str, list[float]] = {m: [] for m in METRICS}
    n = 0
    for _, c in t.groupby(["hardware", "fingerprint", "configuration"]):
        if c["machine"].nunique() < 2:
            continue
        n += 1
        for m in METRICS:
            means = c.groupby("machine")[f"{m}_measured"].mean().dropna()
            means = means[means > 0]
            if len(means) >= 2:
                devs[m].extend(np.abs(means / np.exp(np.log(means).mean()) - 1.0))
    return devs, n


def add_bands(table: pd.DataFrame, coverage: float = COVERAGE) -> pd.DataFrame:
    """Each banded row's band per metric (``design`` in :data:`BANDING`, ``relation = match``), as a projected row
    takes it (:func:`~calorimeter.projection.regimes.choose_band`: the widest band of its regimes, at least its base
    regime's machine spread), the bands made of the other rows (:func:`regime_bands` without the row's fold and
    without its configuration, of its engine, anywhere); whether the row lies within it (``<metric>_covered``; NA
    where the row's regime is refused or the metric has no band); ``band_basis``: the regime that set the tokens/s
    band, or why the row would be refused."""
    table = table.copy()
    for col, default in (("design", "loco"), ("configuration", None), ("machine", "")):
        if col not in table:
            table[col] = table["cell_id"] if default is None else default
    banded = table["relation"].eq("match") & table["design"].isin(BANDING)
    rows = BandRows.of(table)
    floors = {(hw, fp): machine_floor(table, hw, fp, coverage)
              for hw, fp in table.loc[banded, ["hardware", "fingerprint"]].drop_duplicates().itertuples(index=False)}
    reasons = {k: moe_unseen_reason(table, f"{k[0]}/{k[1]}", coverage) for k in floors}
    for m in METRICS:
        table[f"{m}_band"] = math.nan
        table[f"{m}_covered"] = pd.Series(pd.NA, index=table.index, dtype="object")
    table["band_basis"] = ""
    c = rows.cols
    for (hw, fp, fold), h in table[banded].groupby(["hardware", "fingerprint", "fold"], sort=False):
        same = ((c["hardware"] == hw) & (c["fingerprint"] == fp)
                & np.isin(c["configuration"], list(set(h["configuration"]))))
        bands = regime_bands(table, hw, fp, coverage, (c["fold"] != fold) & ~same, rows, reasons[(hw, fp)])
        for i, r in zip(h.index, h.to_dict("records"), strict=True):
            reg = regime_from_columns(r)
            for m in METRICS:
                ch = choose_band(reg, bands, m, floors[(hw, fp)].get(reg.base))
                table.at[i, f"{m}_band"] = ch.half
                e = abs(r[f"{m}_rel_error"])
                table.at[i, f"{m}_covered"] = bool(e <= ch.half) if e == e and ch.half == ch.half else pd.NA
                if m == "tokens_per_s_per_gpu":
                    table.at[i, "band_basis"] = ch.basis or f"refused: {ch.refused}"
    return table


def cross_errors(table: pd.DataFrame, key: str, coverage: float = COVERAGE) -> dict[str, float]:
    """A calibration's measured error on another engine build's or GPU type's cells: per metric, the ``coverage``
    quantile of its absolute errors on the cells of the fingerprints it was compared with (``design = cross``)."""
    if "calibration" not in table:
        return {}
    cross = table[_design(table).eq("cross") & (table["relation"] != "match") & (table["calibration"] == key)]
    return {m: float(np.quantile(e, coverage)) for m in METRICS if len(e := cross[f"{m}_rel_error"].abs().dropna())}


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
            f[m]["banded"] = len(cov)
            f[m]["band_median"] = _q(t[f"{m}_band"].dropna(), 0.5)
            f[m]["regimes"] = regime_coverage(t, m)
    worst = t[(t["tokens_per_s_per_gpu_rel_error"].abs() > TARGET_MAX)
              | (t["energy_per_token_j_rel_error"].abs() > TARGET_MAX)]
    f["over_max"] = [{"cell_id": r.cell_id, "tokens_per_s_per_gpu": float(r.tokens_per_s_per_gpu_rel_error),
                      "energy_per_token": float(r.energy_per_token_j_rel_error), "notes": r.notes}
                     for r in worst.itertuples()]
    return f


def _q(e: pd.Series, q: float) -> float:
    return float(np.quantile(e, q)) if len(e) else math.nan


def loco_summary(table: pd.DataFrame, coverage: float = COVERAGE, fingerprints: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """The validation.json of the leave-one-configuration-out design: per (GPU type, fingerprint) the pooled
    statistics over its held-out cells (all, and GPU-bound) and the targets, per fold the same, and the measured
    cross-fingerprint errors (the ``coverage`` quantile of the absolute errors of each other calibration)."""
    out: dict[str, Any] = {"coverage_stated": coverage, "targets": {
        "median_abs": TARGET_MEDIAN, "max_abs": TARGET_MAX, "mean_signed": TARGET_MEAN_SIGNED,
        "coverage": coverage}, "groups": {}, "cross_fingerprint": {}}
    if table.empty:
        return out
    match = table[(table["relation"] == "match") & _design(table).isin(HELD_OUT)]
    for (hw, fp), g in match.groupby(["hardware", "fingerprint"]):
        if fingerprints is not None and fingerprints.get(hw) != fp:
            continue
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
    banded = table[(table["relation"] == "match") & _design(table).isin(BANDING)]
    out["regimes"] = {m: regime_coverage(banded, m, coverage) for m in ("tokens_per_s_per_gpu", "energy_per_token_j",
                                                                          "power_avg_w")}
    for fold, g in table[_design(table).isin(("cross", "cross-moe"))].groupby("fold"):
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
    if not suffix:  # over all rows, and in each regime
        res["coverage"] = all(coverage_met(stats[m].get("coverage", math.nan), stats[m].get("banded", 0), coverage)
                              and all(r["met"] for r in stats[m].get("regimes", {}).values())
                              for m in METRICS)
    return res


def coverage_interval(covered: int, rows: int, level: float = COVERAGE) -> tuple[float, float]:
    """The ``level`` interval of a coverage measured as ``covered`` of ``rows`` (binomial, Clopper-Pearson);
    ``(0, 1)`` without rows."""
    if rows <= 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # heavy: only the validation summary needs it

    ci = binomtest(int(covered), int(rows)).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def coverage_met(measured: float, cells: int, stated: float = COVERAGE) -> bool:
    """Whether a measured band coverage is consistent with the stated one: the stated coverage lies below the upper
    end of the measured share's 90% interval (:func:`coverage_interval`; a one-sided test at 5%: 33 of 38 cells
    covered meet 90%, 30 of 38 do not). No cells: nothing to contradict it."""
    if measured != measured or cells <= 0:
        return True
    return coverage_interval(round(measured * cells), cells)[1] >= stated


def regime_coverage(t: pd.DataFrame, metric: str, stated: float = COVERAGE) -> dict[str, dict[str, Any]]:
    """Per regime (:func:`~calorimeter.projection.regimes.band_key`: a base regime's rows inside their calibration's
    range; an extrapolation's within its base regime, every row outside the range in that way, alone or among
    others): rows, the median and largest absolute and the mean signed error of ``metric``, the median band, the rows
    within their band (``covered`` of ``banded``: refused rows and metrics without a band excluded) with the 90%
    interval of that share, and whether it meets the stated coverage (:func:`coverage_met`)."""
    out: dict[str, dict[str, Any]] = {}
    if t.empty or f"{metric}_band" not in t:
        return out
    regimes = row_regimes(t)
    base, extra = regimes.str[0], regimes.str[1:]
    members = {}
    for b in BASE_REGIMES:
        members[b] = (base == b) & (extra.str.len() == 0)
        for x in (*EXTRAPOLATIONS, MOE_UNSEEN):
            members[band_key(b, x)] = (base == b) & extra.map(lambda e, x=x: x in e)
    for key, sel in members.items():
        if not sel.any():
            continue
        r = t[sel]
        e = r[f"{metric}_rel_error"].dropna()
        cov = r[f"{metric}_covered"].dropna().astype(bool)
        lo, hi = coverage_interval(int(cov.sum()), len(cov))
        share = float(cov.mean()) if len(cov) else math.nan
        out[key] = {"rows": len(r), "engines": sorted({f"{h}/{f}" for h, f in zip(r["hardware"], r["fingerprint"],
                                                                                   strict=True)}),
                    "median_abs": _q(e.abs(), 0.5), "max_abs": float(e.abs().max()) if len(e) else math.nan,
                    "mean_signed": float(e.mean()) if len(e) else math.nan,
                    "band_median": _q(r[f"{metric}_band"].dropna(), 0.5), "banded": len(cov),
                    "covered": int(cov.sum()), "coverage": share, "coverage_90": [lo, hi],
                    "met": coverage_met(share, len(cov), stated)}
    return out


def _host_bound(t: pd.DataFrame) -> pd.Series:
    return t["notes"].fillna("").str.startswith("host-bound")


def apply_validation(cals: dict[str, Calibration], table: pd.DataFrame, coverage: float = COVERAGE) -> None:
    """Store the validation's findings in the calibrations (in place): each one's band per regime
    (:func:`regime_bands`) and machine spread per base regime (:func:`machine_floor`), its dense bands as
    ``error_band`` / ``error_band_host_bound`` (the GPU-bound and host-bound regimes'), the coverage stated and
    measured on its held-out cells, and its cross-fingerprint error (:func:`cross_errors`)."""
    if table.empty:
        return
    rows = BandRows.of(table)
    for key, cal in cals.items():
        hw, fp = key.split("/", 1)
        cal.regime_bands = regime_bands(table, hw, fp, coverage, rows=rows)
        cal.machine_spread = machine_floor(table, hw, fp, coverage)
        cal.error_band = dict(cal.regime_bands[GPU_BOUND].band)
        cal.error_band_host_bound = dict(cal.regime_bands[HOST_BOUND].band)
        own = table[(table["relation"] == "match") & _design(table).isin(HELD_OUT) & (table["hardware"] == hw)
                    & (table["fingerprint"] == fp)]
        cal.coverage = {"stated": coverage}
        for m in METRICS:
            cov = own[f"{m}_covered"].dropna() if f"{m}_covered" in own else pd.Series(dtype=bool)
            if len(cov):
                cal.coverage[m] = float(cov.astype(bool).mean())
        cal.cross_fingerprint_error = cross_errors(table, key, coverage)


def band_summary(cals: dict[str, Calibration]) -> dict[str, Any]:
    """Per calibration, the band a projected row takes in each regime and the spread between machines (after
    :func:`apply_validation`), JSON-ready."""
    return {k: {"hardware": c.hardware, "machines": len(c.machines),
                "regimes": {r: b.to_dict() for r, b in c.regime_bands.items()}, "machine_spread": c.machine_spread}
            for k, c in cals.items()}


#: the markers of the block of docs/projection.md that :func:`write_doc_block` generates (the docs' convention for
#: generated regions, as :mod:`calorimeter.analysis.findings_docs` writes them)
DOC_BEGIN = ("<!-- BEGIN GENERATED projection-validation: python bench/projection_validation.py --from-json "
             "<validation.json> --doc docs/projection.md; do not edit by hand -->")
DOC_END = "<!-- END GENERATED projection-validation -->"


def _p(x: Any, sign: bool = False) -> str:
    x = float(x) if x is not None else math.nan
    return "n/a" if x != x else (f"{x:+.1%}" if sign else f"{x:.1%}")


def summary_markdown(summary: dict[str, Any], source: str = "") -> str:
    """The validation summary (:func:`loco_summary` with ``bands``: :func:`band_summary`) as the tables of
    docs/projection.md: per current engine the held-out configurations' errors and targets; per regime the errors,
    bands and coverage of every engine's held-out and extrapolation rows; the band each regime gives a projected row
    and the spread between machines."""
    tm = "tokens_per_s_per_gpu"
    out = [f"Generated from `{source}`." if source else "", "",
           "Held-out configurations of the current engines (leave one configuration out; run = unit; stated "
           f"coverage {summary.get('coverage_stated', COVERAGE):.0%}):", "",
           "| engine | cells (folds) | tokens/s median / max / mean signed | energy/token | power | "
           "within band (tokens/s, energy, power) | targets met |", "|---|---|---|---|---|---|---|"]
    for key, g in summary.get("groups", {}).items():
        errs = [f"{_p(g[m]['median_abs'])} / {_p(g[m]['max_abs'])} / {_p(g[m]['mean_signed'], True)}"
                for m in (tm, "energy_per_token_j", "power_avg_w")]
        cov = ", ".join(_p(g[m].get("coverage")) for m in (tm, "energy_per_token_j", "power_avg_w"))
        met = ", ".join(k for k, v in g["targets_met"].items() if v)
        miss = ", ".join(k for k, v in g["targets_met"].items() if not v)
        out.append(f"| {key} | {g['cells']} ({g['folds']}) | {' | '.join(errs)} | {cov} | {met}"
                   + (f"; **not met: {miss}**" if miss else "") + " |")
    out += ["", "Per regime, every engine's held-out and extrapolation rows (a row counts in each regime it is in; "
            "base regimes: rows inside their calibration's range); within band: rows inside the band the other folds "
            "give them, with the 90% interval of that share (binomial):", "",
            "| regime | rows | engines | tokens/s median / max / mean signed | median band | within band (90%) | "
            "energy/token median / max | within band (90%) |", "|---|---|---|---|---|---|---|---|"]
    regimes = summary.get("regimes", {})
    for label, r in regimes.get(tm, {}).items():
        e = regimes.get("energy_per_token_j", {}).get(label, {})

        def cov(x: dict[str, Any]) -> str:
            if not x or not x.get("banded"):
                return "no band"
            lo, hi = x["coverage_90"]
            return (f"{x['covered']}/{x['banded']} ({lo:.0%}-{hi:.0%})" + ("" if x["met"] else " **not met**"))

        out.append(f"| {label} | {r['rows']} | {len(r['engines'])} | {_p(r['median_abs'])} / {_p(r['max_abs'])} / "
                   f"{_p(r['mean_signed'], True)} | +-{_p(r['band_median'])} | {cov(r)} | "
                   f"{_p(e.get('median_abs'))} / {_p(e.get('max_abs'))} | {cov(e)} |")
    for key, b in summary.get("bands", {}).items():
        out += ["", f"The band a projected row of `{key}` takes per regime (its calibration on every committed cell; "
                "an extrapolation's band grows with the doublings beyond the range over those measured):", "",
                "| regime | tokens/s | energy/token | power | measured on |", "|---|---|---|---|---|"]
        for label, r in b["regimes"].items():
            if not r["band"] and label not in BASE_REGIMES and r["reason"].startswith("0 held-out rows"):
                continue  # an extrapolation of a refused or never measured base regime: nothing to add
            if r["band"]:
                x = f", x{r['factor']:.3g} beyond" if r["factor"] == r["factor"] else ""
                out.append(f"| {label} | +-{_p(r['band'].get(tm))} | +-{_p(r['band'].get('energy_per_token_j'))} | "
                           f"+-{_p(r['band'].get('power_avg_w'))} | {r['rows']} rows"
                           f"{'' if r['pure'] else ' (also outside in other ways)'}{x}: "
                           f"{', '.join(r['sources'])} |")
            else:
                out.append(f"| {label} | refused | | | {r['reason']} |")
        for base, sp in b["machine_spread"].items():
            out.append(f"| spread between machines, {base} (the floor of its rows' bands) | +-{_p(sp.get(tm))} | "
                       f"+-{_p(sp.get('energy_per_token_j'))} | +-{_p(sp.get('power_avg_w'))} | configurations "
                       "measured on 2+ machines |")
    return "\n".join(out).strip() + "\n"


def write_doc_block(path: str | Path, summary: dict[str, Any], source: str = "") -> None:
    """Replace the generated block of a doc (between :data:`DOC_BEGIN` and :data:`DOC_END`) by
    :func:`summary_markdown`.

    Raises:
        ValueError: the doc has no such block.
    """
    path = Path(path)
    text = path.read_text()
    if DOC_BEGIN not in text or DOC_END not in text:
        raise ValueError(f"{path}: no generated block ({DOC_BEGIN!r} ... {DOC_END!r})")
    head, rest = text.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    new = f"{head}{DOC_BEGIN}\n{summary_markdown(summary, source)}{DOC_END}{tail}"
    write_atomic(path, lambda tmp: tmp.write_text(new))


def write_validation(table: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, table)
    write_atomic(out.with_suffix(".csv"), lambda tmp: table.to_csv(tmp, index=False))
