# The plan. All logic lives in the calorimeter package; this file only wires it in.
import glob
import os
import re

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from calorimeter.plan.config import ConfigError, load_sweep_config, sweep_lines
from calorimeter.plan.plan import make_plan
from calorimeter.records.paths import CELL_TABLES_LAYOUT, CONFIGS_TABLE, TABLE_NAMES, CellPaths, SweepPaths


# The sweep files are read again, strictly (UTF-8, no key given twice, bounded aliases; docs/input.md), with the
# line of every key for messages. A sweep given with --configfile replaces the embedded default sweep instead of
# being deep-merged into it (merging would leak the default grid's values into the sweep); --config KEY=VALUE still
# overrides. The one validation of the sweep (workflow/schemas/config.schema.yaml, stricter where the schema is
# silent; every default filled in; errors name file, line, key and value): the rules and scripts read the
# validated config.
try:
    _files = workflow.overwrite_configfiles or [os.path.join(workflow.basedir, "config", "config.yaml")]
    PLAN = make_plan({**load_sweep_config(_files, workflow.config_settings.config), "_source": str(_files[-1]),
                      "_lines": sweep_lines(_files, workflow.config_settings.config)})
except ConfigError as e:
    raise WorkflowError(f"calorimeter: {e}") from None
config.clear()
config.update(PLAN.config)

RESULTS = PLAN.results_dir
logger.info(
    f"calorimeter: sweep {PLAN.sweep}: {len(PLAN.cells)} cells, {len(PLAN.runnable)} planned, "
    f"{len(PLAN.cells) - len(PLAN.runnable)} pruned (see {RESULTS}/{PLAN.sweep}/plan.json)"
)
# What the planned cells cost (calorimeter.projection.cost): each cell's projected wall time (in the train jobs' messages)
# and the sweep's GPU-hours with the band, from the committed calibration; cells it cannot price are counted apart.
from calorimeter.projection.cost import sweep_cost

COST = sweep_cost(PLAN)
COST_OF_CELL = COST.by_id()
_left = {pc.cell.cell_id for pc in PLAN.runnable
         if not CellPaths.of(PLAN.results_dir, pc.cell.sweep, pc.cell.cell_id).run_json.is_file()}
for _line in COST.lines(_left):
    logger.info(f"calorimeter: {_line}")
# SWEEP names the plan, tables and figures; each cell lives under its own sweep (a subset's cells stay with the
# sweep they were selected from: nothing is measured twice and no sweep rewrites another's plan or tables).
SWEEP = PLAN.sweep
CELLS = {pc.cell.cell_id: pc for pc in PLAN.runnable}
#: each cell's place in the plan's order (repetitions interleaved, shuffled per repetition: plan/grid.py)
CELL_ORDER = {cid: i for i, cid in enumerate(CELLS)}
CELL_SWEEPS = sorted({pc.cell.sweep for pc in PLAN.cells} | {SWEEP})
PLAN_DICTS = [pc.to_dict() for pc in PLAN.cells]  # once: the plan rule and every figure's caption use them


wildcard_constraints:
    sweep="|".join(re.escape(s) for s in CELL_SWEEPS),
    # any folder name: which cells exist is decided by the input functions (an alternation of every cell id is
    # matched against every file of the DAG: quadratic in the number of cells)
    cell="[^/]+",


#: every file of the sweep, as wildcard patterns of the rules (calorimeter.records.paths spells each name once)
SWEEP_FILES = SweepPaths.of(RESULTS, "{sweep}")
CELL_FILES = CellPaths.of(RESULTS, "{sweep}", "{cell}")


def sweep_paths():
    """The files of this sweep."""
    return SweepPaths.of(RESULTS, SWEEP)


def get_cell(wildcards):
    """The planned cell of a train job."""
    return CELLS[wildcards.cell]


def cell_paths(cid):
    """The folder of a runnable cell (under its own sweep)."""
    return CellPaths.of(RESULTS, CELLS[cid].cell.sweep, cid)


#: the input a train job asks for under `snakemake figures`: a file no rule makes and none writes, so that no train job
#: can enter that DAG (Snakemake then reads an existing run.json as a plain input file)
NO_TRAINING = "figures-train-nothing"


def get_placement_inputs(wildcards):
    """The host profiles a train job waits for (a thermal cell: those of the sweep's calibration cells, made by the
    thermal_profile rule). ancient(): they order the jobs, a later rerun of them never re-measures this cell. Under
    `snakemake figures` a file that never exists: the figures target trains nothing, whatever changed since the
    records were measured."""
    from calorimeter.plan.placement import prerequisites

    if figures_only():
        return [str(cell_paths(wildcards.cell).root / NO_TRAINING)]
    cells = [pc.cell for pc in PLAN.runnable]
    return [ancient(str(cell_paths(cid).thermal_profile)) for cid in prerequisites(get_cell(wildcards).cell, cells)]


def get_cell_profiles():
    """What every cell that can profile its hosts gave the thermal-profile store (the thermal_profile rule's
    outputs): each calibration cell, and with placement.derive_profiles (the default) each dense training cell
    without pipeline stages."""
    from calorimeter.plan.kinds import get_kind
    from calorimeter.plan.models import CATALOGUE
    from calorimeter.plan.placement import profiles_host

    derive = PLAN.settings.placement.derive_profiles
    return [str(cell_paths(cid).thermal_profile) for cid, pc in CELLS.items()
            if profiles_host(pc.cell, CATALOGUE.get(pc.cell.model))
            and (derive or get_kind(pc.cell.kind).profiles_hosts)]


def figures_only():
    """True under `snakemake figures` (the artifact-evaluation target): tables and figures are rebuilt from the
    records that exist and nothing is trained. Evaluated when the DAG is built (the targets are known then)."""
    return "figures" in set(getattr(getattr(workflow, "dag_settings", None), "targets", None) or ())


def table_cell_ids():
    """Cells whose tables feed the sweep tables: every runnable cell, or under `snakemake figures` only those with
    a record (run.json and steps.parquet)."""
    if figures_only():
        cells = {cid: cell_paths(cid) for cid in CELLS}
        return [cid for cid, c in cells.items() if c.run_json.is_file() and c.steps.is_file()]
    return list(CELLS)


def get_cell_record(wildcards):
    """Input of a cell's tables: its run.json (made by train), the same file under every target, so that a plain
    `snakemake` after `snakemake figures` (or `calorimeter rerun`) finds the tables up to date: a changed set of
    input files would rebuild every table. Under `snakemake figures` no train job can make it (get_placement_inputs)."""
    return str(CellPaths.of(RESULTS, wildcards.sweep, wildcards.cell).run_json)


def get_cell_table_files(table):
    """Input function: one table's per-cell Parquet files."""

    def files(wildcards):
        return [str(cell_paths(cid).table(table)) for cid in table_cell_ids()]

    return files


def compare_runs():
    """runs tables of the sweeps named under `compare:` that exist (scale comparison, cross-hardware findings);
    nothing else under the results folder is read."""
    paths = [SweepPaths.of(RESULTS, s).table("runs") for s in config.get("compare", []) if s != SWEEP]
    return [str(p) for p in paths if p.is_file()]


def compare_missing():
    """Sweeps named under `compare:` that have no runs table yet."""
    return [s for s in config.get("compare", [])
            if s != SWEEP and not SweepPaths.of(RESULTS, s).table("runs").is_file()]


def figure_params_cells(name):
    """Cells a figure draws, from the plan's parameters (named in its report caption)."""
    from calorimeter.figures.selection import figure_cells

    return figure_cells(name, PLAN_DICTS)


def get_cell_records():
    """run.json of every runnable cell (targets of the default target, never of `snakemake figures`)."""
    return [str(cell_paths(cid).run_json) for cid in CELLS]


def figure_output(name, ext):
    """A figure's output file; its PNG in the report (labelled for the report's index in the study's order), unless
    the sweep's data could not draw it when it was last drawn (its JSON says why; the report's first page lists it
    with the reason)."""
    from calorimeter.figures import FIGURES
    from calorimeter.figures.report import not_drawn

    path = str(SWEEP_FILES.figure(name, ext))
    if ext != "png" or name in not_drawn(sweep_paths(), [name]):
        return path
    number = list(FIGURES).index(name) + 1
    return report(path, caption=f"../report/{name}.rst", category="Figures",
                  labels={"figure": f"{number:02d}. {FIGURES[name].TITLE}"})


def get_final_outputs():
    """Targets of the default target: the tables, every figure (calorimeter.figures.FIGURES); with
    `study_projection` the study's sweeps projected (rules/projection.smk, rule study_projection)."""
    from calorimeter.figures import FIGURES
    from calorimeter.reproduce.study import outputs as study_outputs

    sweep = sweep_paths()
    return (
        [str(sweep.table(t)) for t in (*TABLE_NAMES, CONFIGS_TABLE)]
        + [str(sweep.summary_parquet), str(sweep.summary_csv)]
        + [str(sweep.figure(name, ext)) for name in FIGURES for ext in ("png", "pdf")]
        + [str(sweep.findings_csv), str(sweep.findings_html)]
        + ([str(p) for p in study_outputs(f"{RESULTS}/study-projected")] if config.get("study_projection") else [])
    )


# The train rule's resources that the profile or the command line set (not Snakemake's implicit mem_mb, disk_mb,
# ...): the train script honours the SLURM plugin's names among them and refuses unknown ones (launch/settings.py).
from calorimeter.launch.settings import export_train_resources

export_train_resources(workflow)
# The models and hardware the sweep defines (models:, hardware_profiles:, inline hf_config), for every script and rank
# this Snakemake process starts (docs/models.md).
from calorimeter.plan.definitions import export_definitions

export_definitions(PLAN.config.get("_definitions") or {})


def compare_outputs():
    """The files of `snakemake compare` for this sweep (rules/compare.smk)."""
    root = sweep_paths().root / "compare"
    return {name: str(root / name) for name in ("compare.csv", "compare_counts.csv", "compare.html", "compare.png")}


def proj_records(sources):
    """What each projection step reads of its sources (rules/projection.smk; PROJ_SOURCE_TABLES is set there): their tables (or engine-benchmark files) and every cell
    record, so that the calibration reruns when a new record lands in a source (or a new calibration sweep is
    committed: the default sources include them)."""
    out = []
    for s in sources:
        jsonl = sorted(glob.glob(f"{s}/*/engine_speed.jsonl"))
        out += jsonl or [f"{s}/tables/{t}.parquet" for t in PROJ_SOURCE_TABLES]
        out += sorted(glob.glob(f"{s}/cells/*/run.json"))
    return out
