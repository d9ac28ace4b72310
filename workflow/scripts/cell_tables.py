"""Snakemake script of rule cell_tables: the tables of one cell, from its own folder only."""

import sys
from pathlib import Path

from calorimeter.analysis.cell import cell_tables, write_cell_tables
from calorimeter.records.paths import CellPaths

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
cell = CellPaths(Path(sm.input[0]).parent)  # from its run.json, or steps.parquet under `snakemake figures`
tables = cell_tables(cell.root)
write_cell_tables(tables, cell)
print({name: len(df) for name, df in tables.items()}, tables.runs["data_notes"].iloc[0], file=sys.stderr)
