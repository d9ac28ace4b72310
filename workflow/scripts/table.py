"""Snakemake script of the table_* rules: concatenate one table over the sweep's cells (the runs table also
lists the plan's pruned and not-run cells, and gives the configs table over repetitions)."""

import sys

from calorimeter.analysis.repeats import configs_table
from calorimeter.analysis.tables import concat_cell_tables, load_plan_cells, runs_table, write_table

sm = snakemake  # noqa: F821 - injected by Snakemake
terminal = sys.stderr
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
notes: list[str] = []
df = concat_cell_tables(sm.input.cells, notes)
for note in notes:  # a damaged per-cell table is skipped, never fatal (the other cells still count)
    print(f"calorimeter: damaged table: {note}", file=terminal)
    print(f"damaged table: {note}", file=sys.stderr)
if sm.params.table == "runs":
    df = runs_table(load_plan_cells(sm.input.plan), df)
    write_table(df, sm.output.table)
    write_table(df, sm.output.parquet, sm.output.csv)
    write_table(configs_table(df), sm.output.configs)
    print(df["status"].value_counts().to_string(), file=sys.stderr)
else:
    write_table(df, sm.output.table)
    print(f"{len(df)} rows from {len(sm.input.cells)} cells", file=sys.stderr)
