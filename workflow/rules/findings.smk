# ---- findings: the study's findings checked on this sweep's tables (calorimeter.findings) ----
#
#   results/<sweep>/findings.csv    one row per finding: the study's statement and number, this sweep's number with
#                                   its 95% interval, the verdict (agrees / disagrees / cannot say) and what is missing
#   results/<sweep>/findings.html   the same, as the HTML report's "Findings" section
# Cross-hardware findings also read the runs tables of the sweeps named under `compare:` (and only those).


rule findings:
    input:
        runs=f"{RESULTS}/{{sweep}}/tables/runs.parquet",
        gpus=f"{RESULTS}/{{sweep}}/tables/gpus.parquet",
        kernels=f"{RESULTS}/{{sweep}}/tables/kernels.parquet",
        compare=compare_runs(),
    output:
        csv=report(f"{RESULTS}/{{sweep}}/findings.csv", caption="../report/findings.rst", category="Findings"),
        html=report(f"{RESULTS}/{{sweep}}/findings.html", caption="../report/findings.rst", category="Findings"),
    params:
        compare_missing=compare_missing(),
    log:
        f"{RESULTS}/{{sweep}}/logs/findings.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/findings.py"
