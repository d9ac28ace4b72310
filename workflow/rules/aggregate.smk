# ---- aggregate: one row per cell (run, pruned or not yet run) ----


rule plan:
    output:
        f"{RESULTS}/{{sweep}}/plan.json",
    params:
        plan=lambda wc: [pc.to_dict() for pc in PLAN.cells],
    log:
        f"{RESULTS}/{{sweep}}/logs/plan.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/plan.py"


rule summary:
    input:
        runs=get_run_files,
        plan=f"{RESULTS}/{{sweep}}/plan.json",
    output:
        parquet=report(
            f"{RESULTS}/{{sweep}}/summary.parquet",
            caption="../report/summary.rst",
            category="Tables",
        ),
        csv=report(
            f"{RESULTS}/{{sweep}}/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
        ),
    log:
        f"{RESULTS}/{{sweep}}/logs/summary.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/summary.py"
