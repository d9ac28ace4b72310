"""Snakemake script of rule projection_project: one projected row per planned cell of the sweep."""

import sys

from calorimeter.plan.cell import Cell
from calorimeter.projection.calibration import load_calibrations
from calorimeter.projection.sweep import project_cells, write_projection

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
cells = [Cell.from_dict(c) for c in sm.params.cells]
df = project_cells(cells, load_calibrations(sm.input.calibration), sm.params.network)
write_projection(df, sm.output.table)
print(f"{len(df)} cells projected", file=sys.stderr)
