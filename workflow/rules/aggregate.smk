# ---- aggregate: per-cell tables, then one rule per sweep table that only concatenates them ----
#
#   results/<sweep>/cells/<id>/cell_tables/{runs,gpus,steps,kernels,timeseries}.parquet   from that cell only
#   results/<sweep>/tables/{runs,gpus,steps,kernels,timeseries}.parquet                     the aggregated store
#   results/<sweep>/summary.parquet|.csv                                                     = the runs table
#   results/<sweep>/tables/configs.parquet          one row per configuration: mean and 95% interval over repetitions
#
# A cell's tables depend on its run.json only (written last, after steps/telemetry/kernels; the same input under
# `snakemake figures`, see get_cell_record): a new or rerun cell recomputes its own tables, and the sweep tables are
# re-concatenated.


rule plan:
    output:
        str(SWEEP_FILES.plan_json),
    params:
        plan=lambda wc: PLAN_DICTS,
    log:
        str(SWEEP_FILES.log("plan")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/plan.py"


rule cell_tables:
    input:
        get_cell_record,
    output:
        **{t: str(CELL_FILES.table(t)) for t in TABLE_NAMES},
    params:
        layout=CELL_TABLES_LAYOUT,  # a new layout retables every cell (records/paths.py)
    log:
        str(SWEEP_FILES.log("cell_tables/{cell}")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/cell_tables.py"


# One rule per table; the runs table also lists the plan's pruned and not-run cells, is the sweep's summary and gives
# the configs table (repetitions of a configuration summarised).
for _table in TABLE_NAMES:

    rule:
        name:
            f"table_{_table}"
        input:
            cells=get_cell_table_files(_table),
            plan=str(SWEEP_FILES.plan_json) if _table == "runs" else [],
        output:
            table=str(SWEEP_FILES.table(_table)),
            **(
                {
                    "configs": str(SWEEP_FILES.table(CONFIGS_TABLE)),
                    "parquet": str(SWEEP_FILES.summary_parquet),
                    "csv": report(
                        str(SWEEP_FILES.summary_csv),
                        caption="../report/summary.rst",
                        category="Tables",
                    ),
                }
                if _table == "runs"
                else {}
            ),
        params:
            table=_table,
        log:
            str(SWEEP_FILES.log(f"table_{_table}")),
        localrule: True
        conda:
            "../../envs/calorimeter.yaml"
        script:
            "../scripts/table.py"
