# ---- findings: the study's findings checked on this sweep's tables (calorimeter.findings) ----
#
#   results/<sweep>/findings.csv    one row per finding: the study's statement and number, this sweep's number with
#                                   its 95% interval, the verdict (agrees / disagrees / cannot say) and what is missing
#   results/<sweep>/findings.html   the same, as the HTML report's "Findings" section
# Cross-hardware findings also read the runs tables of the sweeps named under `compare:` (and only those).


rule findings:
    input:
        **{t: str(SWEEP_FILES.table(t)) for t in ("runs", "gpus", "kernels")},
        compare=compare_runs(),
    output:
        csv=report(str(SWEEP_FILES.findings_csv), caption="../report/findings.rst", category="Findings"),
        html=report(str(SWEEP_FILES.findings_html), caption="../report/findings.rst", category="Findings"),
    params:
        compare_missing=compare_missing(),
    log:
        str(SWEEP_FILES.log("findings")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/findings.py"
