"""Snakemake script of the figure_* rules: render one figure of calorimeter.figures.FIGURES from the tables."""

import json
import sys
from pathlib import Path

import pandas as pd

from calorimeter.figures import FIGURES, render

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
tables = {name: pd.read_parquet(sm.input[name]) for name in FIGURES[sm.params.figure].TABLES}
extra = [pd.read_parquet(p) for p in sm.input.get("compare", [])]
if extra:  # other sweeps' runs tables (scale-up vs. scale-out)
    tables["runs"] = pd.concat([tables["runs"], *[e for e in extra if not e.empty]], ignore_index=True)
res = render(sm.params.figure, tables, Path(sm.output.png), Path(sm.output.pdf))
Path(sm.output.json).write_text(json.dumps(res.to_dict(), indent=1) + "\n")
print(f"{res.n_points} points; missing: {res.missing}", file=sys.stderr)
