"""Snakemake script of rule projection_figures: predicted vs. measured, and projected cells next to measured ones."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.figures.projection import plot_projected, plot_validation

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
measured = pd.concat([pd.read_parquet(p) for p in sm.input.measured], ignore_index=True)
val = plot_validation(pd.read_parquet(sm.input.validation), Path(sm.output.validation), Path(sm.output.validation_pdf))
proj = plot_projected(pd.read_parquet(sm.input.projected), measured, Path(sm.output.projected),
                      Path(sm.output.projected_pdf))
Path(sm.output.json).write_text(json.dumps({"validation": val.to_dict(), "projection": proj.to_dict()}, indent=1))
print(val.to_dict()["n_points"], proj.to_dict()["n_points"], file=sys.stderr)
