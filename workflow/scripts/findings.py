"""Snakemake script of rule findings: check the study's findings on the sweep's tables."""

import sys

import pandas as pd

from calorimeter.findings import evaluate
from calorimeter.findings.report import write_findings
from calorimeter.records.legacy import upgrade_runs

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
# tables of any age read with today's columns (calorimeter.records.legacy.upgrade_runs): the findings do not depend
# on which sweep was rebuilt last
tables = {name: pd.read_parquet(sm.input[name]) for name in ("runs", "gpus", "kernels")}
tables["runs"] = upgrade_runs(tables["runs"])
compare = [upgrade_runs(pd.read_parquet(p)) for p in sm.input.compare]
tables["compare"] = pd.concat(compare, ignore_index=True) if compare else pd.DataFrame()
tables["compare_missing"] = pd.DataFrame({"sweep": list(sm.params.compare_missing)})
df = evaluate(tables)
write_findings(df, sm.output.csv, sm.output.html, title=f"Findings: sweep {sm.wildcards.sweep}")
print(df["verdict"].value_counts().to_string(), file=sys.stderr)
