# ---- figures: each a function of the aggregated tables (calorimeter.figures.FIGURES), with a report caption ----
#
# `snakemake figures --configfile <sweep>.yaml` is the artifact-evaluation target: it rebuilds every table and
# figure from the cell records that exist and never runs training (see README "Figures and artifact evaluation").

from calorimeter.figures import FIGURES

for _fig, _module in FIGURES.items():

    rule:
        name:
            f"figure_{_fig}"
        input:
            **{t: str(SWEEP_FILES.table(t)) for t in _module.TABLES},
            compare=compare_runs() if _fig == "scale_compare" else [],
        output:
            png=report(
                str(SWEEP_FILES.figure(_fig, "png")),
                caption=f"../report/{_fig}.rst",
                category="Figures",
            ),
            pdf=str(SWEEP_FILES.figure(_fig, "pdf")),
            json=str(SWEEP_FILES.figure(_fig, "json")),
        params:
            figure=_fig,
            cells=figure_params_cells(_fig),  # for the caption: the cells it draws
        log:
            str(SWEEP_FILES.log(f"figure_{_fig}")),
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        script:
            "../scripts/figure.py"


rule figures:
    input:
        get_final_outputs(),
    localrule: True
