"""Snakemake script of rule projection_project: one projected row per planned cell of the sweep; prints which
calibration (fingerprint, records) each GPU type's cells used."""

import sys

from calorimeter.plan.cell import Cell
from calorimeter.projection.calibration import load_calibrations
from calorimeter.projection.sweep import project_cells, used_calibrations, write_projection

sm = snakemake  # noqa: F821 - injected by Snakemake
log = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
cells = [Cell.from_dict(c) for c in sm.params.cells]
cals = load_calibrations(sm.input.calibration)
df = project_cells(cells, cals, sm.params.network, sm.params.engine or None)
write_projection(df, sm.output.table)
for line in [f"{len(df)} cells projected", *used_calibrations(df, cals)]:
    print(f"projection: {line}", file=log)
    print(f"projection: {line}", file=sys.stderr)  # the console: which calibration was used
