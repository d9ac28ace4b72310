"""Snakemake script of rule projection_validate: leave one configuration out over the calibration cells of every engine
fingerprint, the extrapolation folds, the cross-fingerprint errors (or the configured folds), band coverage per
regime."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.projection.accuracy import loco_summary, machine_spread, summarize
from calorimeter.projection.bands import add_bands
from calorimeter.projection.calibration import collective_points
from calorimeter.projection.catalogue import Fold
from calorimeter.projection.measured import load_measured
from calorimeter.projection.report import write_validation
from calorimeter.projection.validation import loco, newest_fingerprints, validate
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
coverage = float(sm.params.coverage)
if sm.params.folds:
    table = validate([Fold.from_dict(f) for f in sm.params.folds])
    if len(table):
        table["relation"] = "match"
        table = add_bands(table, coverage)
    summary = summarize(table) if len(table) else {}
else:
    ms = load_measured(list(sm.params.sources))
    fps = newest_fingerprints(ms)
    table = loco(ms, fps, collective_points(list(sm.params.collectives)), coverage=coverage)
    summary = loco_summary(table, coverage, fps)
    summary["machine_spread"] = machine_spread(ms)
if table is None or table.empty:
    table = pd.DataFrame(columns=["fold", "cell_id", "notes", "relation", "hardware", "fingerprint", "calibration"])
write_validation(table, sm.output.table)
text = json.dumps(summary, indent=1, default=float)
write_atomic(Path(sm.output.summary), lambda tmp: tmp.write_text(text))
print(json.dumps(summary, indent=1, default=float), file=sys.stderr)
