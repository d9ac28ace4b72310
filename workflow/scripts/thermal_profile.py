"""Snakemake script of rule thermal_profile: a recorded cell's hosts profiled from the cell's tables (computed once,
by rule cell_tables), kept in the results folder's thermal-profiles/ store; what it gave, or why nothing, is the
rule's output (calorimeter.placement.profile, docs/placement.md)."""

import logging
from pathlib import Path

import pandas as pd

from calorimeter.analysis.cell import CellTables
from calorimeter.placement.profile import keep_cell_profiles
from calorimeter.plan.settings import PlacementSettings
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import CellPaths
from calorimeter.records.run_record import read_run_record

sm = snakemake  # noqa: F821 - injected by Snakemake
Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                    handlers=[logging.FileHandler(sm.log[0])])
cell = CellPaths(Path(sm.input.run).parent)
tables = CellTables(runs=pd.read_parquet(sm.input.runs), gpus=pd.read_parquet(sm.input.gpus))
settings = PlacementSettings.from_config(sm.config)
outcome = keep_cell_profiles(cell.root, read_run_record(cell.run_json), settings, tables)
write_json_atomic(Path(sm.output[0]), outcome)
logging.info("%s", outcome)
