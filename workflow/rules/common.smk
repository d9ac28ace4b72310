# Validation and the plan. All logic lives in the calorimeter package; this file only wires it in.
import json

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

from calorimeter.plan.config import ConfigError
from calorimeter.plan.plan import make_plan
from calorimeter.plan.config import load_sweep_config


# A sweep given with --configfile replaces the embedded default sweep instead of being deep-merged into it
# (merging would leak the default grid's values into the sweep); --config KEY=VALUE still overrides.
if workflow.overwrite_configfiles:
    config.clear()
    config.update(load_sweep_config(workflow.overwrite_configfiles, workflow.config_settings.config))

validate(config, schema="../schemas/config.schema.yaml")

try:
    PLAN = make_plan({**config, "_source": str(workflow.overwrite_configfiles[-1])}
                     if workflow.overwrite_configfiles else config)
except ConfigError as e:
    raise WorkflowError(f"calorimeter: {e}") from None

RESULTS = PLAN.results_dir
logger.info(
    f"calorimeter: sweep {PLAN.sweep}: {len(PLAN.cells)} cells, {len(PLAN.runnable)} planned, "
    f"{len(PLAN.cells) - len(PLAN.runnable)} pruned (see {RESULTS}/{PLAN.sweep}/plan.json)"
)
SWEEP = PLAN.sweep
CELLS = {pc.cell.cell_id: pc for pc in PLAN.runnable}


wildcard_constraints:
    sweep=SWEEP,
    cell="|".join(CELLS) if CELLS else "no-runnable-cell",


def get_cell(wildcards):
    """The planned cell of a train job."""
    return CELLS[wildcards.cell]


def get_run_files(wildcards=None):
    """run.json of every runnable cell."""
    return [f"{RESULTS}/{SWEEP}/cells/{cid}/run.json" for cid in CELLS]


def get_final_outputs():
    """Targets of the default target: the table and the figure."""
    return [
        f"{RESULTS}/{SWEEP}/summary.parquet",
        f"{RESULTS}/{SWEEP}/summary.csv",
        f"{RESULTS}/{SWEEP}/figures/throughput.png",
    ]

