"""Snakemake script of rule train: run one cell through the calorimeter package."""

import logging
import sys
from pathlib import Path

from calorimeter.launch.arrays import submit_ahead
from calorimeter.launch.run import CellConfigError, run_cell
from calorimeter.launch.settings import launcher_settings, train_resources_from_env
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
    # the resources the profile or command line set (workflow/rules/common.smk), not Snakemake's implicit ones
    settings = launcher_settings(sm.config, dict(sm.resources.items()), train_resources_from_env())
    cell = Cell.from_dict(sm.params.cell)
    submit_ahead(cell, settings, sm.config)  # launcher.array: the cell's shape-mates go to the queue with it
    run_cell(cell, settings, CellPaths(Path(sm.params.cell_dir)), sm.params.estimates)
    try:  # where the sweep stands now that this cell is done (never fails the rule)
        from calorimeter.operate.view import progress_line

        logging.info("%s", progress_line(sm.config))
    except Exception as e:  # noqa: BLE001
        logging.warning("sweep progress unavailable: %s: %s", type(e).__name__, e)
except (ConfigError, CellConfigError) as e:  # bad settings: nothing was submitted; the message says which
    logging.error("train %s: not submitted: %s", sm.wildcards.cell, e)
    sys.exit(1)
except Exception:
    logging.exception("train %s failed", sm.wildcards.cell)
    raise
