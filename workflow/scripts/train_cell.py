"""Snakemake script of rule train: run one cell through the calorimeter package."""

import logging
import sys
from pathlib import Path

from calorimeter.launch.run import CellConfigError, run_cell
from calorimeter.launch.settings import launcher_settings
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError
from calorimeter.records.paths import CellPaths

sm = snakemake  # noqa: F821 - injected by Snakemake
Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                    handlers=[logging.FileHandler(sm.log[0]), logging.StreamHandler(sys.stderr)])
try:
    # The validated sweep's launcher and telemetry settings, overridden by the profile's resources of this rule
    # (see calorimeter.launch.settings): built once for this launch.
    settings = launcher_settings(sm.config, dict(sm.resources.items()))
    run_cell(Cell.from_dict(sm.params.cell), settings, CellPaths(Path(sm.params.cell_dir)), sm.params.estimates)
except (ConfigError, CellConfigError) as e:  # bad settings: nothing was submitted; the message says which
    logging.error("train %s: not submitted: %s", sm.wildcards.cell, e)
    sys.exit(1)
except Exception:
    logging.exception("train %s failed", sm.wildcards.cell)
    raise
