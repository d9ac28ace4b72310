"""Snakemake script of rule summary."""

import sys
from pathlib import Path

from calorimeter.analysis.summary import summarize, write_summary
from calorimeter.plan.plan import make_plan

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
df = summarize(make_plan(sm.config), [Path(f) for f in sm.input.runs])
write_summary(df, Path(sm.output.parquet), Path(sm.output.csv))
print(df["status"].value_counts().to_string(), file=sys.stderr)
