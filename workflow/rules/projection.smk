# ---- projection: a calibrated model projects every planned cell; validated on held-out measured cells ----
#
#   results/<sweep>/projection/validation.parquet|.csv   per fold, every held-out measured cell: measured, predicted, error
#   results/<sweep>/projection/validation.json           per GPU type and fingerprint: median/max/mean signed error,
#                                                        band coverage, per fold; cross-fingerprint errors
#   results/<sweep>/projection/calibration.json          one calibration per GPU type and engine fingerprint: its
#                                                        records, bands, coverage, cross-fingerprint error
#   results/<sweep>/projection/projected.parquet|.csv    one row per planned cell, source=projected (never in tables/)
#   results/<sweep>/figures/projection_validation.png    error distributions per metric and regime (held-out cells)
#   results/<sweep>/figures/projection.png               projected cells (dot and band) next to measured ones
#   results/<sweep>/figures/projected_fig*.png           the study's figures drawn from the projected rows
#
# `snakemake projection --configfile <sweep>.yaml` trains nothing: it reads committed or existing sweep tables.

from calorimeter.figures.projected_study import figures_for
from calorimeter.projection.calibration import MODEL_VERSION
from calorimeter.projection.settings import ProjectionSettings

PROJ = ProjectionSettings.from_config(config, workflow.basedir)
PROJ_CALIBRATION = list(PROJ.calibration)
PROJ_FOLDS = [f.to_dict() for f in PROJ.validation]
PROJ_SOURCE_TABLES = ("runs", "kernels", "gpus")
PROJ_SOURCES = sorted({*PROJ_CALIBRATION, *(s for f in PROJ_FOLDS for s in (*f["train"], *f["test"]))})
#: the sweep folder pattern, joined as a path (with results_dir=. a text join gave './{sweep}/...', which Snakemake
#: warns about on every output)
SWEEP_ROOT = str(SWEEP_FILES.root)


rule projection_validate:
    input:
        proj_records(PROJ_SOURCES),
    output:
        table=f"{SWEEP_ROOT}/projection/validation.parquet",
        csv=report(f"{SWEEP_ROOT}/projection/validation.csv", caption="../report/projection.rst",
                   category="Projection"),
        summary=f"{SWEEP_ROOT}/projection/validation.json",
    params:
        folds=PROJ_FOLDS,
        sources=PROJ_CALIBRATION,
        collectives=list(PROJ.collectives),
        coverage=PROJ.coverage,
        model_version=MODEL_VERSION,  # a new projection model refits (Snakemake reruns on changed params)
    log:
        f"{SWEEP_ROOT}/logs/projection_validate.log",
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/projection_validate.py"


rule projection_calibrate:
    input:
        tables=proj_records(PROJ_CALIBRATION),
        validation=f"{SWEEP_ROOT}/projection/validation.parquet",
    output:
        f"{SWEEP_ROOT}/projection/calibration.json",
    params:
        sources=PROJ_CALIBRATION,
        collectives=list(PROJ.collectives),
        coverage=PROJ.coverage,
        model_version=MODEL_VERSION,
    log:
        f"{SWEEP_ROOT}/logs/projection_calibrate.log",
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/projection_calibrate.py"


rule projection_project:
    input:
        calibration=f"{SWEEP_ROOT}/projection/calibration.json",
    output:
        table=f"{SWEEP_ROOT}/projection/projected.parquet",
        csv=report(f"{SWEEP_ROOT}/projection/projected.csv", caption="../report/projection.rst",
                   category="Projection"),
    params:
        network=PROJ.network,
        engine=PROJ.engine,
        cells=lambda wc: [pc.cell.to_dict() for pc in PLAN.runnable],
    log:
        f"{SWEEP_ROOT}/logs/projection_project.log",
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/projection_project.py"


rule projection_figures:
    input:
        validation=f"{SWEEP_ROOT}/projection/validation.parquet",
        projected=f"{SWEEP_ROOT}/projection/projected.parquet",
        calibration=f"{SWEEP_ROOT}/projection/calibration.json",
        measured=[f"{s}/tables/runs.parquet" for s in PROJ_CALIBRATION if not glob.glob(f"{s}/*/engine_speed.jsonl")],
        # the newest committed prospective check (cells measured after the model was fixed), drawn beside the folds
        prospective=sorted(glob.glob("results/reference/projection-validation-*/prospective.csv"))[-1:],
    output:
        validation=report(f"{SWEEP_ROOT}/figures/projection_validation.png",
                          caption="../report/projection_validation.rst", category="Projection"),
        validation_pdf=f"{SWEEP_ROOT}/figures/projection_validation.pdf",
        projected=report(f"{SWEEP_ROOT}/figures/projection.png", caption="../report/projection.rst",
                         category="Projection"),
        projected_pdf=f"{SWEEP_ROOT}/figures/projection.pdf",
        study=[report(f"{SWEEP_ROOT}/figures/projected_{_fig}.png", caption="../report/projected_study.rst",
                      category="Projection") for _fig in figures_for(PLAN_DICTS)],
        json=f"{SWEEP_ROOT}/figures/projection.json",
    params:
        network=PROJ.network,
        engine=PROJ.engine,
        study_figures=figures_for(PLAN_DICTS),
    log:
        f"{SWEEP_ROOT}/logs/projection_figures.log",
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/projection_figures.py"


rule projection:
    input:
        f"{sweep_paths().root}/projection/projected.parquet",
        f"{sweep_paths().root}/projection/validation.json",
        f"{sweep_paths().root}/figures/projection_validation.png",
        f"{sweep_paths().root}/figures/projection.png",
    localrule: True


# ---- the study at its own scale: its four sweeps projected with the committed calibration (config study_projection) ----
#
#   <results_dir>/study-projected/<study sweep>/projected.csv   every cell: projected (bands, wall time), refused, pruned
#   <results_dir>/study-projected/figures/projected_fig*-<sweep>.png   the study's figure of that sweep, marked PROJECTED
#   <results_dir>/study-projected/cost.csv, README.md         GPU-hours per sweep with the band; what it rests on

from pathlib import Path

from calorimeter.projection.cost import CALIBRATION_FILE, TIMING_FILE, committed_set
from calorimeter.reproduce.study import STUDY_SWEEPS, outputs as study_outputs

STUDY_OUT = str(Path(RESULTS) / "study-projected")  # a path join: never "./study-projected"
STUDY_SET = committed_set()


rule study_projection:
    input:
        calibration=str(STUDY_SET / CALIBRATION_FILE),
        timing=str(STUDY_SET / TIMING_FILE),
        sweeps=list(STUDY_SWEEPS),
        measured=[str(p) for n in STUDY_SWEEPS for p in [Path(RESULTS) / Path(n).stem / "tables" / "runs.parquet"]
                  if p.is_file()],
    output:
        readme=f"{STUDY_OUT}/README.md",
        cost=report(f"{STUDY_OUT}/cost.csv", caption="../report/projected_study.rst", category="Projected study"),
        tables=[str(p) for p in study_outputs(STUDY_OUT) if p.name == "projected.csv"],
        figures=[report(str(p), caption="../report/projected_study.rst", category="Projected study")
                 for p in study_outputs(STUDY_OUT) if p.suffix == ".png"],
    log:
        str(Path(RESULTS) / "logs" / "study_projection.log"),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/study_projection.py"
