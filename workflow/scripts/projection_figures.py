"""Snakemake script of rule projection_figures: predicted vs. measured, and projected cells next to measured ones."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.figures import render
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
# a cell measured in two sweeps (the TP-overlap set repeats findings cells): the figure shows the last
runs = pd.concat([pd.read_parquet(p) for p in sm.input.measured], ignore_index=True)
runs = runs.drop_duplicates("cell_id", keep="last")
val = render("projection_validation", {"validation": pd.read_parquet(sm.input.validation)},
             Path(sm.output.validation), Path(sm.output.validation_pdf))
proj = render("projection", {"projected": pd.read_parquet(sm.input.projected), "runs": runs},
              Path(sm.output.projected), Path(sm.output.projected_pdf))
text = json.dumps({"validation": val.to_dict(), "projection": proj.to_dict()}, indent=1)
write_atomic(Path(sm.output.json), lambda tmp: tmp.write_text(text))
print(val.n_points, proj.n_points, file=sys.stderr)
