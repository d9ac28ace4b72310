# ---- figures: each a function of the aggregated tables (calorimeter.figures.FIGURES), with a report caption ----
#
# `snakemake figures --configfile <sweep>.yaml` is the artifact-evaluation target: it rebuilds every table and
# figure from the cell records that exist and never runs training (see README "Figures and artifact evaluation").
# One job draws every figure of a sweep: the figures share their tables, and one Python process reading them once
# takes seconds where one process per figure took minutes (each paid the imports and the table reads again).

from calorimeter.figures import FIGURES
from calorimeter.figures.report import ReportPages

FIGURE_TABLES = sorted({t for _module in FIGURES.values() for t in _module.TABLES})
#: the report's figures in report order (the study's), with the titles its index and first page show
FIGURE_TITLES = tuple((_name, _module.TITLE) for _name, _module in FIGURES.items())


rule draw_figures:
    input:
        **{t: str(SWEEP_FILES.table(t)) for t in FIGURE_TABLES},
        compare=compare_runs(),
    output:
        **{f"{_fig}_{ext}": figure_output(_fig, ext) for _fig in FIGURES for ext in ("png", "pdf", "json")},
    params:
        figures=list(FIGURES),
        # the report's first page and captions (provenance, thumbnails), read when the report is written; an object
        # Snakemake does not track as a parameter, so it never reruns the job
        report=ReportPages(RESULTS, SWEEP, FIGURE_TITLES),
        # for the captions: the cells each figure draws (cells_<figure>)
        **{f"cells_{_fig}": figure_params_cells(_fig) for _fig in FIGURES},
    log:
        str(SWEEP_FILES.log("figures")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/figure.py"


rule figures:
    input:
        get_final_outputs(),
    localrule: True
