# ---- figures: each a function of the aggregated tables (calorimeter.figures.FIGURES), with a report caption ----
#
# `snakemake figures --configfile <sweep>.yaml` is the artifact-evaluation target: it rebuilds every table and
# figure from the cell records that exist and never runs training (see README "Figures and artifact evaluation").
# One job draws every figure of a sweep: the figures share their tables, and one Python process reading them once
# takes seconds where one process per figure took minutes (each paid the imports and the table reads again).

from calorimeter.figures import FIGURES

FIGURE_TABLES = sorted({t for _module in FIGURES.values() for t in _module.TABLES})


rule draw_figures:
    input:
        **{t: str(SWEEP_FILES.table(t)) for t in FIGURE_TABLES},
        compare=compare_runs(),
    output:
        **{
            f"{_fig}_{ext}": (
                report(str(SWEEP_FILES.figure(_fig, "png")), caption=f"../report/{_fig}.rst", category="Figures")
                if ext == "png"
                else str(SWEEP_FILES.figure(_fig, ext))
            )
            for _fig in FIGURES
            for ext in ("png", "pdf", "json")
        },
    params:
        figures=list(FIGURES),
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
