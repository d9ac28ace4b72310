"""Validation's designs: calibrate on some measured cells, predict held-out ones, and give the error of every held-out
cell (the validation table; its bands: :mod:`~calorimeter.projection.bands`, its summaries:
:mod:`~calorimeter.projection.accuracy`, its report: :mod:`~calorimeter.projection.report`).

Two designs:

* **leave-one-configuration-out** (:func:`loco`, the default): for every GPU type and engine fingerprint, each
  configuration (a cell's ``config_id`` and TP overlap mechanism; its repetitions held out together) is predicted
  from a calibration on every other cell of that fingerprint. The band of each fold is the stated-coverage quantile
  of the other folds' absolute errors, so the coverage check is itself on held-out cells. Then the
  **cross-fingerprint error**: every other calibration of the same GPU type (an older or different engine build), and
  the other GPU types', predicting the fingerprint's cells.
* **folds of sources** (:func:`validate`, ``projection.validation``): a fold names its training and held-out sweep
  folders.

With the leave-one-configuration-out design come the **extrapolation folds** (:func:`scale_folds`,
:func:`moe_from_dense`): the error of a row beyond its calibration's range, measured.

Each held-out cell gets its measured and predicted iteration time, energy per token, average power, tokens/s/GPU and
MFU, the relative errors, and notes that say what the model had to extrapolate for it (a layout, degree or model
that no training cell has) or why the measurement itself is outside the model (host-bound cells).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.models import get_model
from calorimeter.plan.work import StageWork, workload
from calorimeter.projection.bands import add_bands
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
from calorimeter.projection.measured import (
    HOST_BOUND_BUSY_FRAC,
    MeasuredSet,
    cell_from_row,
    load_measured,
    timed_schedule,
)
from calorimeter.projection.model import Projector
from calorimeter.projection.regimes import BEYOND_COLUMNS, GPU_COUNT, MICRO_BATCH, MODEL_SIZE, SEQUENCE
from calorimeter.projection.targets import COVERAGE, DESIGNS, METRICS

#: the extrapolation folds: range key -> the regime its held-out rows are in
SCALE_KEYS: dict[str, str] = {"world_size": GPU_COUNT, "seq_len": SEQUENCE, "micro_batch": MICRO_BATCH,
                              "model_params": MODEL_SIZE}
#: work counts whose calibration range is checked (per micro-batch; the optimizer per iteration): a held-out cell
#: beyond RANGE_FACTOR x the largest training value gets a note (its time there extrapolates the fitted rate)
RANGE_FEATURES: tuple[str, ...] = ("dense_flops", "act_elems", "head_elems", "head_elems_vp", "z3_elems", "optim_elems",
                                   "moe_elems")
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
    moe_tp = [c for c in train if c.ep > 1 or get_model(c.model).is_moe]
    if get_model(cell.model).is_moe and cell.tp > 1 and not any(c.tp > 1 for c in moe_tp):
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


def _range_value(st: StageWork, feature: str) -> float:
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
    runs = ms.runs[timed_schedule(ms.runs)].copy()  # a schedule the model refuses is neither fitted nor scored
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


__all__ = ["RANGE_FACTOR", "RANGE_FEATURES", "SCALE_KEYS", "coverage_notes", "feature_tops", "fold_key", "loco",
           "moe_from_dense", "newest_fingerprints", "predict_cells", "scale_folds", "validate", "validate_fold"]
