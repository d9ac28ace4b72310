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
* :mod:`~calorimeter.projection.calibration`: one GPU type's and engine fingerprint's fitted calibration (JSON);
* :mod:`~calorimeter.projection.settings`: the ``projection:`` config block, resolved (every default once);
* :mod:`~calorimeter.projection.model`: one cell's projected row with what is calibrated and what is assumed;
* :mod:`~calorimeter.projection.sweep`: every planned cell of a sweep;
* :mod:`~calorimeter.projection.validation`: held-out measured cells predicted from the others (leave one
  configuration out), band coverage, cross-fingerprint error.

See docs/projection.md.
"""

from calorimeter.projection.calibration import Calibration, calibrate
from calorimeter.projection.measured import MeasuredSet, load_measured
from calorimeter.projection.model import Projector
from calorimeter.projection.settings import DEFAULT_CALIBRATION, ProjectionSettings
from calorimeter.projection.sweep import project_plan
from calorimeter.projection.validation import Fold, loco, loco_summary, summarize, validate

__all__ = ["DEFAULT_CALIBRATION", "Calibration", "Fold", "MeasuredSet", "ProjectionSettings", "Projector",
           "calibrate", "load_measured", "loco", "loco_summary", "project_plan", "summarize", "validate"]
