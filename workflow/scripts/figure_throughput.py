"""Snakemake script of rule figure_throughput."""

import sys
from pathlib import Path

import pandas as pd

from calorimeter.figures.throughput import plot_throughput

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
n = plot_throughput(pd.read_parquet(sm.input[0]), Path(sm.output.png), Path(sm.output.pdf))
print(f"{n} cells drawn", file=sys.stderr)
