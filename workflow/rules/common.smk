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


AGG_TABLES = ("runs", "gpus", "steps", "kernels", "timeseries")


def figures_only():
    """True under `snakemake figures` (the artifact-evaluation target): tables and figures are rebuilt from the
    records that exist and nothing is trained. Evaluated when the DAG is built (the targets are known then)."""
    return "figures" in set(getattr(getattr(workflow, "dag_settings", None), "targets", None) or ())


def table_cell_ids():
    """Cells whose tables feed the sweep tables: every runnable cell, or under `snakemake figures` only those with
    a record (run.json and steps.parquet)."""
    import os

    if figures_only():
        return [cid for cid in CELLS if all(os.path.isfile(f"{RESULTS}/{SWEEP}/cells/{cid}/{f}")
                                            for f in ("run.json", "steps.parquet"))]
    return list(CELLS)


def get_cell_record(wildcards):
    """Input of a cell's tables: its run.json (made by train), or under `snakemake figures` its steps.parquet,
    which is written with run.json but is no rule's output, so that no train job can enter the DAG."""
    name = "steps.parquet" if figures_only() else "run.json"
    return f"{RESULTS}/{wildcards.sweep}/cells/{wildcards.cell}/{name}"


def get_cell_table_files(table):
    """Input function: one table's per-cell Parquet files."""

    def files(wildcards):
        return [f"{RESULTS}/{wildcards.sweep}/cells/{cid}/cell_tables/{table}.parquet" for cid in table_cell_ids()]

    return files


def compare_runs():
    """runs tables of the sweeps named under `compare:` that exist (scale comparison, cross-hardware findings);
    nothing else under the results folder is read."""
    import os

    paths = [f"{RESULTS}/{s}/tables/runs.parquet" for s in config.get("compare", []) if s != SWEEP]
    return [p for p in paths if os.path.isfile(p)]


def compare_missing():
    """Sweeps named under `compare:` that have no runs table yet."""
    import os

    return [s for s in config.get("compare", []) if s != SWEEP
            and not os.path.isfile(f"{RESULTS}/{s}/tables/runs.parquet")]


def figure_params_cells(name):
    """Cells a figure draws, from the plan's parameters (named in its report caption)."""
    from calorimeter.figures.selection import figure_cells

    return figure_cells(name, [pc.to_dict() for pc in PLAN.cells])


def get_final_outputs():
    """Targets of the default target: the tables, every figure (calorimeter.figures.FIGURES)."""
    from calorimeter.figures import FIGURES

    base = f"{RESULTS}/{SWEEP}"
    return (
        [f"{base}/tables/{t}.parquet" for t in AGG_TABLES]
        + [f"{base}/summary.parquet", f"{base}/summary.csv"]
        + [f"{base}/figures/{name}.{ext}" for name in FIGURES for ext in ("png", "pdf")]
        + [f"{base}/findings.csv", f"{base}/findings.html"]
    )
