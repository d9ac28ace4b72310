# ---- aggregate: per-cell tables, then one rule per sweep table that only concatenates them ----
#
#   results/<sweep>/cells/<id>/cell_tables/{runs,gpus,steps,kernels,timeseries}.parquet   from that cell only
#   results/<sweep>/tables/{runs,gpus,steps,kernels,timeseries}.parquet                     the aggregated store
#   results/<sweep>/summary.parquet|.csv                                                     = the runs table
#
# A cell's tables depend on its run.json only (written last, after steps/telemetry/kernels; under `snakemake
# figures` on its steps.parquet, see get_cell_record): a new or rerun cell
# recomputes its own tables, and the sweep tables are re-concatenated.


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


rule cell_tables:
    input:
        get_cell_record,
    output:
        **{t: f"{RESULTS}/{{sweep}}/cells/{{cell}}/cell_tables/{t}.parquet" for t in AGG_TABLES},
    log:
        f"{RESULTS}/{{sweep}}/logs/cell_tables/{{cell}}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/cell_tables.py"


rule table_runs:
    input:
        cells=get_cell_table_files("runs"),
        plan=f"{RESULTS}/{{sweep}}/plan.json",
    output:
        table=f"{RESULTS}/{{sweep}}/tables/runs.parquet",
        parquet=f"{RESULTS}/{{sweep}}/summary.parquet",
        csv=report(
            f"{RESULTS}/{{sweep}}/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
        ),
    params:
        table="runs",
    log:
        f"{RESULTS}/{{sweep}}/logs/table_runs.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table.py"


rule table_gpus:
    input:
        cells=get_cell_table_files("gpus"),
    output:
        table=f"{RESULTS}/{{sweep}}/tables/gpus.parquet",
    params:
        table="gpus",
    log:
        f"{RESULTS}/{{sweep}}/logs/table_gpus.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table.py"


rule table_steps:
    input:
        cells=get_cell_table_files("steps"),
    output:
        table=f"{RESULTS}/{{sweep}}/tables/steps.parquet",
    params:
        table="steps",
    log:
        f"{RESULTS}/{{sweep}}/logs/table_steps.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table.py"


rule table_kernels:
    input:
        cells=get_cell_table_files("kernels"),
    output:
        table=f"{RESULTS}/{{sweep}}/tables/kernels.parquet",
    params:
        table="kernels",
    log:
        f"{RESULTS}/{{sweep}}/logs/table_kernels.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table.py"


rule table_timeseries:
    input:
        cells=get_cell_table_files("timeseries"),
    output:
        table=f"{RESULTS}/{{sweep}}/tables/timeseries.parquet",
    params:
        table="timeseries",
    log:
        f"{RESULTS}/{{sweep}}/logs/table_timeseries.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/table.py"
