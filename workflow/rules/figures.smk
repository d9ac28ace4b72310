# ---- figures: each a function of the aggregated tables (calorimeter.figures.FIGURES), with a report caption ----
#
# `snakemake figures --configfile <sweep>.yaml` is the artifact-evaluation target: it rebuilds every table and
# figure from the cell records that exist and never runs training (see README "Figures and artifact evaluation").

from calorimeter.figures import FIGURES

for _fig, _spec in FIGURES.items():

    rule:
        name:
            f"figure_{_fig}"
        input:
            **{t: f"{RESULTS}/{{sweep}}/tables/{t}.parquet" for t in _spec.tables},
            compare=compare_runs() if _fig == "scale_compare" else [],
        output:
            png=report(
                f"{RESULTS}/{{sweep}}/figures/{_fig}.png",
                caption=f"../report/{_fig}.rst",
                category="Figures",
            ),
            pdf=f"{RESULTS}/{{sweep}}/figures/{_fig}.pdf",
            json=f"{RESULTS}/{{sweep}}/figures/{_fig}.json",
        params:
            figure=_fig,
            cells=figure_params_cells(_fig),  # for the caption: the cells it draws
        log:
            f"{RESULTS}/{{sweep}}/logs/figure_{_fig}.log",
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        script:
            "../scripts/figure.py"


rule figures:
    input:
        get_final_outputs(),
    localrule: True
