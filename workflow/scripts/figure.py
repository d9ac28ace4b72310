"""Snakemake script of the draw_figures rule: every figure of calorimeter.figures.FIGURES from the sweep's tables."""

import json
import sys
import traceback
from pathlib import Path

import pandas as pd

from calorimeter.figures import FIGURES, render
from calorimeter.records.atomic import write_atomic
from calorimeter.records.legacy import upgrade_runs

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
tables = {name: pd.read_parquet(sm.input[name]) for name in {t for f in FIGURES.values() for t in f.TABLES}}
tables["runs"] = upgrade_runs(tables["runs"])  # tables of any age, with today's columns
extra = [upgrade_runs(pd.read_parquet(p)) for p in sm.input.get("compare", [])]
failed = []
for name in sm.params.figures:
    mine = {t: tables[t] for t in FIGURES[name].TABLES}
    if name == "scale_compare" and extra:  # other sweeps' runs tables (scale-up vs. scale-out)
        mine["runs"] = pd.concat([mine["runs"], *[e for e in extra if not e.empty]], ignore_index=True)
    try:
        res = render(name, mine, Path(sm.output[f"{name}_png"]), Path(sm.output[f"{name}_pdf"]))
    except Exception:  # noqa: BLE001 - every other figure is still drawn; the job fails at the end, naming it
        failed.append(name)
        print(f"{name}: FAILED\n{traceback.format_exc()}", file=sys.stderr)
        continue
    text = json.dumps(res.to_dict(), indent=1) + "\n"
    write_atomic(Path(sm.output[f"{name}_json"]), lambda tmp, text=text: tmp.write_text(text))
    print(f"{name}: {res.n_points} points; missing: {res.missing}", file=sys.stderr)
if failed:
    raise SystemExit(f"figures that could not be drawn: {', '.join(failed)} (traceback in {sm.log[0]})")
