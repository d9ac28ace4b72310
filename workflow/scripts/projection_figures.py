"""Snakemake script of rule projection_figures: the validation's error distributions, the projected cells next to
measured ones, and the study's figures of this sweep drawn from its projected rows."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.figures import render
from calorimeter.figures.common import save
from calorimeter.figures.projected_study import draw
from calorimeter.plan.plan import make_plan
from calorimeter.projection.study import StudyProjector, plan_rows
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
# a cell measured in two sweeps (the TP-overlap set repeats findings cells): the figure shows the last
runs = pd.concat([pd.read_parquet(p) for p in sm.input.measured], ignore_index=True)
runs = runs.drop_duplicates("cell_id", keep="last")
prospective = pd.concat([pd.read_csv(p) for p in sm.input.prospective], ignore_index=True) if sm.input.prospective \
    else pd.DataFrame()
val = render("projection_validation", {"validation": pd.read_parquet(sm.input.validation),
                                       "prospective": prospective},
             Path(sm.output.validation), Path(sm.output.validation_pdf))
proj = render("projection", {"projected": pd.read_parquet(sm.input.projected), "runs": runs},
              Path(sm.output.projected), Path(sm.output.projected_pdf))
# the study's figures of this sweep: every cell of its plan (projected, refused or pruned) as the study draws it
rows = plan_rows(make_plan(dict(sm.config)),
                 StudyProjector.from_file(sm.input.calibration, sm.params.network, sm.params.engine))
study = {}
for figure, png in zip(sm.params.study_figures, sm.output.study, strict=True):
    fig, res = draw({"projected": rows, "runs": runs}, figure)
    save(fig, png)
    study[figure] = res.to_dict()
text = json.dumps({"validation": val.to_dict(), "projection": proj.to_dict(), "study": study,
                   "prospective": list(sm.input.prospective)}, indent=1)
write_atomic(Path(sm.output.json), lambda tmp: tmp.write_text(text))
print(val.n_points, proj.n_points, file=sys.stderr)
