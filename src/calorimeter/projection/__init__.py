"""Projection to scale: a calibrated, validated model of time, power and energy for cells that cannot be run.

It prices the cell's workload (:mod:`calorimeter.plan.work`: what one rank of each pipeline stage does per
iteration, FLOPs, elements, messages, analytical; the plan's placement uses the same model). Modules, each with one
job:

* :mod:`~calorimeter.projection.measured`: the measured cells (sweeps' aggregated tables);
* :mod:`~calorimeter.projection.compute`: compute time per kernel category and host gaps, fitted on kernel traces;
* :mod:`~calorimeter.projection.collectives`: one collective call's time from measured curves, inter-node links from
  the hardware profile;
* :mod:`~calorimeter.projection.schedule`: 1F1B pipeline, ZeRO-3 prefetch overlap, gradient accumulation and the
  end-of-iteration synchronisation;
* :mod:`~calorimeter.projection.power`: average GPU power from activity under the power cap;
* :mod:`~calorimeter.projection.calibration`: one GPU type's fitted calibration (JSON);
* :mod:`~calorimeter.projection.model`: one cell's projected row with what is calibrated and what is assumed;
* :mod:`~calorimeter.projection.sweep`: every planned cell of a sweep;
* :mod:`~calorimeter.projection.validation`: held-out measured cells predicted from the others.

See docs/projection.md.
"""

from calorimeter.projection.calibration import Calibration, calibrate
from calorimeter.projection.measured import MeasuredSet, load_measured
from calorimeter.projection.model import Projector
from calorimeter.projection.sweep import DEFAULT_CALIBRATION, project_plan
from calorimeter.projection.validation import Fold, summarize, validate

__all__ = ["DEFAULT_CALIBRATION", "Calibration", "Fold", "MeasuredSet", "Projector", "calibrate", "load_measured",
           "project_plan", "summarize", "validate"]
