# ---- projection: a calibrated model projects every planned cell; validated on held-out measured cells ----
#
#   results/<sweep>/projection/validation.parquet|.csv   per fold, every held-out measured cell: measured, predicted, error
#   results/<sweep>/projection/validation.json           per fold: median/max error, cells beyond 25% and their notes
#   results/<sweep>/projection/calibration.json          the fitted model (with the validation's error band)
#   results/<sweep>/projection/projected.parquet|.csv    one row per planned cell, source=projected (never in tables/)
#   results/<sweep>/figures/projection_validation.png    predicted vs. measured
#   results/<sweep>/figures/projection.png               projected cells (hatched, error band) next to measured ones
#
# `snakemake projection --configfile <sweep>.yaml` trains nothing: it reads committed or existing sweep tables.

from calorimeter.projection.sweep import DEFAULT_CALIBRATION, DEFAULT_COLLECTIVES, DEFAULT_FOLDS

PROJECTION = config.get("projection") or {}
PROJ_CALIBRATION = list(PROJECTION.get("calibration") or DEFAULT_CALIBRATION)
PROJ_COLLECTIVES = list(PROJECTION.get("collectives") or DEFAULT_COLLECTIVES)
PROJ_FOLDS = list(PROJECTION.get("validation") or DEFAULT_FOLDS)
PROJ_SOURCE_TABLES = ("runs", "kernels", "gpus")
PROJ_FOLD_SOURCES = sorted({s for f in PROJ_FOLDS for s in (*f["train"], *f["test"])})
# the aggregated tables each projection step reads from its source sweep folders
PROJ_CALIBRATION_TABLES = [f"{s}/tables/{t}.parquet" for s in PROJ_CALIBRATION for t in PROJ_SOURCE_TABLES]
PROJ_FOLD_TABLES = [f"{s}/tables/{t}.parquet" for s in PROJ_FOLD_SOURCES for t in PROJ_SOURCE_TABLES]


rule projection_validate:
    input:
        PROJ_FOLD_TABLES,
    output:
        table=f"{RESULTS}/{{sweep}}/projection/validation.parquet",
        csv=report(f"{RESULTS}/{{sweep}}/projection/validation.csv", caption="../report/projection.rst",
                   category="Projection"),
        summary=f"{RESULTS}/{{sweep}}/projection/validation.json",
    params:
        folds=PROJ_FOLDS,
    log:
        f"{RESULTS}/{{sweep}}/logs/projection_validate.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/projection_validate.py"


rule projection_calibrate:
    input:
        tables=PROJ_CALIBRATION_TABLES,
        validation=f"{RESULTS}/{{sweep}}/projection/validation.parquet",
    output:
        f"{RESULTS}/{{sweep}}/projection/calibration.json",
    params:
        sources=PROJ_CALIBRATION,
        collectives=PROJ_COLLECTIVES,
    log:
        f"{RESULTS}/{{sweep}}/logs/projection_calibrate.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/projection_calibrate.py"


rule projection_project:
    input:
        calibration=f"{RESULTS}/{{sweep}}/projection/calibration.json",
    output:
        table=f"{RESULTS}/{{sweep}}/projection/projected.parquet",
        csv=report(f"{RESULTS}/{{sweep}}/projection/projected.csv", caption="../report/projection.rst",
                   category="Projection"),
    params:
        network=PROJECTION.get("network"),
        cells=lambda wc: [pc.cell.to_dict() for pc in PLAN.runnable],
    log:
        f"{RESULTS}/{{sweep}}/logs/projection_project.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/projection_project.py"


rule projection_figures:
    input:
        validation=f"{RESULTS}/{{sweep}}/projection/validation.parquet",
        projected=f"{RESULTS}/{{sweep}}/projection/projected.parquet",
        measured=[f"{s}/tables/runs.parquet" for s in PROJ_CALIBRATION],
    output:
        validation=report(f"{RESULTS}/{{sweep}}/figures/projection_validation.png",
                          caption="../report/projection.rst", category="Projection"),
        validation_pdf=f"{RESULTS}/{{sweep}}/figures/projection_validation.pdf",
        projected=report(f"{RESULTS}/{{sweep}}/figures/projection.png", caption="../report/projection.rst",
                         category="Projection"),
        projected_pdf=f"{RESULTS}/{{sweep}}/figures/projection.pdf",
        json=f"{RESULTS}/{{sweep}}/figures/projection.json",
    log:
        f"{RESULTS}/{{sweep}}/logs/projection_figures.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/projection_figures.py"


rule projection:
    input:
        f"{RESULTS}/{SWEEP}/projection/projected.parquet",
        f"{RESULTS}/{SWEEP}/projection/validation.json",
        f"{RESULTS}/{SWEEP}/figures/projection_validation.png",
        f"{RESULTS}/{SWEEP}/figures/projection.png",
    localrule: True
