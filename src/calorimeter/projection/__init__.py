"""Projection to scale: a calibrated, validated model of time, power and energy for cells that cannot be run.

It prices the cell's workload (:mod:`calorimeter.plan.work`: what one rank of each pipeline stage does per
iteration, FLOPs, elements, messages, analytical; the plan's placement uses the same model). Modules, each with one
job:

* :mod:`~calorimeter.projection.measured`: the measured cells (sweeps' aggregated tables; engine-benchmark calls via
  :mod:`~calorimeter.projection.engine_speed`);
* :mod:`~calorimeter.projection.fingerprint`: the engine fingerprint of a record (kernels, TP overlap, versions,
  GPU, power limit);
* :mod:`~calorimeter.projection.compute`: compute time per kernel category and host gaps, fitted on kernel traces;
* :mod:`~calorimeter.projection.collectives`: one collective call's time from measured curves, inter-node links from
  the hardware profile;
* :mod:`~calorimeter.projection.schedule`: 1F1B pipeline, ZeRO-3 prefetch overlap, gradient accumulation and the
  end-of-iteration synchronisation;
* :mod:`~calorimeter.projection.power`: average GPU power from activity under the power cap;
* :mod:`~calorimeter.projection.regimes`: a projected row's regime, the band each regime takes, the machine class;
* :mod:`~calorimeter.projection.hosts`: how fast a machine's host issues work (a factor per machine);
* :mod:`~calorimeter.projection.catalogue`: the calibration catalogue (config/calibration.yaml): the default
  measurements, as data;
* :mod:`~calorimeter.projection.settings`: the ``projection:`` config block, resolved (every default once);
* :mod:`~calorimeter.projection.calibration`: calibrate: one GPU type's and engine fingerprint's fitted calibration
  (JSON);
* :mod:`~calorimeter.projection.model`: one cell's projected row with what is calibrated and what is assumed;
* :mod:`~calorimeter.projection.sweep`: every planned cell of a sweep;
* :mod:`~calorimeter.projection.study`: every cell of a plan as a row: projected, refused (with the reason) or pruned;
* :mod:`~calorimeter.projection.coverage`: which cells the projection can price at all (light);
* :mod:`~calorimeter.projection.cost`: what a sweep costs before it runs (wall time per cell, GPU-hours);
* validate: :mod:`~calorimeter.projection.targets` (the metrics, designs, stated coverage and targets),
  :mod:`~calorimeter.projection.validation` (the designs: held-out measured cells predicted from the others, leave
  one configuration out, extrapolation folds, cross-fingerprint), :mod:`~calorimeter.projection.bands` (each
  regime's band, each held-out row's, the bands stored in the calibrations), :mod:`~calorimeter.projection.accuracy`
  (the summaries: errors, coverage, targets, run and machine spread);
* :mod:`~calorimeter.projection.prospective`: cells measured after the model was fixed, projected as a user would;
* :mod:`~calorimeter.projection.report`: the validation's generated doc tables and its table files.

The names below are imported when first used: ``calorimeter plan`` reads the cost module (and its cache) without
paying for pandas and the fitted model.

See docs/projection.md.
"""

from __future__ import annotations

import importlib
from typing import Any

#: exported name -> the module that defines it
_EXPORTS = {
    "Calibration": "calibration", "calibrate": "calibration", "MeasuredSet": "measured", "load_measured": "measured",
    "Projector": "model", "ProjectionSettings": "settings", "catalogue": "catalogue", "Fold": "catalogue",
    "project_plan": "sweep", "loco": "validation", "validate": "validation", "loco_summary": "accuracy",
    "summarize": "accuracy", "project_new": "prospective",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
