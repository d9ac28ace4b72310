"""Snakemake script of rule cell_tables: the tables of one cell, from its own folder only.

A damaged file (run.json not JSON, steps.parquet not Parquet, a telemetry table missing a column) is left out with a
note naming the cell and the file, on the terminal and in the run row's data_notes: the other cells' tables and the
figures are still drawn (calorimeter.analysis.damaged).
"""

import sys
from pathlib import Path

from calorimeter.analysis.cell import write_cell_tables
from calorimeter.analysis.damaged import readable_cell_tables
from calorimeter.records.paths import CellPaths

sm = snakemake  # noqa: F821 - injected by Snakemake
terminal = sys.stderr
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
cell = CellPaths(Path(sm.input[0]).parent)  # from its run.json
tables, notes = readable_cell_tables(cell.root)
for note in notes:
    print(f"calorimeter: damaged record: {note}", file=terminal)
    print(f"damaged record: {note}", file=sys.stderr)
write_cell_tables(tables, cell)
print({name: len(df) for name, df in tables.items()}, tables.runs["data_notes"].iloc[0], file=sys.stderr)
