"""Snakemake script of rule projection_calibrate: fit the model on the calibration sweeps, per GPU type."""

import json
import sys

import pandas as pd

from calorimeter.projection.calibration import calibrate_all
from calorimeter.projection.validation import error_band

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
band = error_band(pd.read_parquet(sm.input.validation))
cals = calibrate_all(sm.params.sources, sm.params.collectives, band)
with open(sm.output[0], "w") as f:
    json.dump({hw: cal.to_dict() for hw, cal in cals.items()}, f, indent=1, default=float)
for hw, cal in cals.items():
    print(f"{hw}: {len(cal.cells)} cells, compute fit {cal.compute.fit_rel_error}, band {band}", file=sys.stderr)
