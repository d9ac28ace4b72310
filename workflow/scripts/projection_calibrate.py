"""Snakemake script of rule projection_calibrate: fit the model on the calibration sweeps, per GPU type."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.projection.calibration import calibrate_all
from calorimeter.projection.validation import error_band
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
band = error_band(pd.read_parquet(sm.input.validation))
cals = calibrate_all(sm.params.sources, sm.params.collectives, band)
text = json.dumps({hw: cal.to_dict() for hw, cal in cals.items()}, indent=1, default=float)
write_atomic(Path(sm.output[0]), lambda tmp: tmp.write_text(text))
for hw, cal in cals.items():
    print(f"{hw}: {len(cal.cells)} cells, compute fit {cal.compute.fit_rel_error}, band {band}", file=sys.stderr)
