"""Snakemake script of rule cell_tables: the tables of one cell, from its own folder only."""

import sys
from pathlib import Path

from calorimeter.analysis.cell import cell_tables, write_cell_tables

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
tables = cell_tables(Path(sm.input[0]).parent)  # run.json, or steps.parquet under `snakemake figures`
write_cell_tables(tables, Path(sm.output[0]).parent)
print({name: len(df) for name, df in tables.items()}, tables.runs["data_notes"].iloc[0], file=sys.stderr)
