# ---- aggregate: one row per cell (run, pruned or not yet run) ----


rule plan:
    output:
        f"{RESULTS}/{{sweep}}/plan.json",
    params:
        plan=lambda wc: [pc.to_dict() for pc in PLAN.cells],
    localrule: True
    run:
        from calorimeter.records.atomic import write_json_atomic

        write_json_atomic(output[0], {"sweep": SWEEP, "cells": params.plan})


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
    script:
        "../scripts/summary.py"
