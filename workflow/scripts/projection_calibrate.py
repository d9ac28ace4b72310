"""Snakemake script of rule projection_calibrate: one calibration per GPU type and engine fingerprint, with the
validation's bands, coverage and cross-fingerprint errors."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.projection.bands import apply_validation
from calorimeter.projection.calibration import MODEL_VERSION, calibrate_all
from calorimeter.projection.fingerprint import Fingerprint
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
cals = calibrate_all(sm.params.sources, sm.params.collectives)
apply_validation(cals, pd.read_parquet(sm.input.validation), float(sm.params.coverage))
text = json.dumps({"model_version": MODEL_VERSION, "sources": list(sm.params.sources),
                   "collectives": list(sm.params.collectives),
                   "calibrations": [cal.to_dict() for cal in cals.values()]}, indent=1, default=float)
write_atomic(Path(sm.output[0]), lambda tmp: tmp.write_text(text))
for key, cal in cals.items():
    print(f"{key}: {Fingerprint.from_dict(cal.fingerprint).describe()}; {len(cal.cells)} cells, newest "
          f"{cal.recorded_at or '-'}; band {cal.error_band}; coverage {cal.coverage}; cross-fingerprint "
          f"{cal.cross_fingerprint_error}", file=sys.stderr)
