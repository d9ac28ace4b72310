"""Snakemake script of rule compare: this sweep against `reference` (calorimeter.reproduce)."""

import sys
from pathlib import Path

from calorimeter.reproduce.compare import compare, figure_counts, overall, passed
from calorimeter.reproduce.noise import load_noise
from calorimeter.reproduce.report import write_outputs
from calorimeter.reproduce.sources import load_source

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
if not sm.params.reference:
    raise SystemExit("snakemake compare: name the reference with --config reference=<folder of records or tables>")
ref, rep = load_source(sm.params.reference), load_source(Path(sm.input.runs).parent)
result = compare(ref, rep, noise=load_noise(sm.params.noise))
counts = figure_counts(result)
write_outputs(result, counts, Path(sm.output.csv).parent, sm.params.reference, str(Path(sm.input.runs).parent.parent))
print(counts.to_string(index=False), file=sys.stderr)
if not passed(result):
    raise SystemExit(f"{overall(result)}: see {sm.output.csv} ({counts.iloc[-1].to_dict()})")
