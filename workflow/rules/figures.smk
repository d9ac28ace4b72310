# ---- figures: each a function of the aggregated tables ----


rule figure_throughput:
    input:
        f"{RESULTS}/{{sweep}}/summary.parquet",
    output:
        png=report(
            f"{RESULTS}/{{sweep}}/figures/throughput.png",
            caption="../report/throughput.rst",
            category="Figures",
        ),
        pdf=f"{RESULTS}/{{sweep}}/figures/throughput.pdf",
    log:
        f"{RESULTS}/{{sweep}}/logs/figure_throughput.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/figure_throughput.py"
