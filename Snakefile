# calorimeter: how distributed LLM training spends time, power and heat.
#
# Result layout (one folder per sweep, one per cell):
#   results/<sweep>/plan.json                        every cell of the sweep with status planned|pruned and reasons
#   results/<sweep>/cells/<cell_id>/run.json         resolved config, status ok|oom|failed, metrics, provenance
#   results/<sweep>/cells/<cell_id>/steps.parquet    per rank and step: phase, loss, time_s, wall timestamps
#   results/<sweep>/cells/<cell_id>/attempts/<UTC>/  every attempt: submitit logs, rank results (never deleted)
#   results/<sweep>/summary.parquet|.csv             one row per cell
#   results/<sweep>/figures/throughput.png|.pdf      tokens/s per GPU and MFU per configuration
#
# Run another sweep with:  snakemake --configfile config/sweeps/<name>.yaml

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/projection.smk"
include: "workflow/rules/compare.smk"


rule all:
    default_target: True
    input:
        get_final_outputs(),
        # every runnable cell's record: a deleted run.json reruns its cell, even where the sweep's tables exist
        records=get_cell_records(),
        # what each cell that can profile its hosts gave the thermal-profile store
        profiles=get_cell_profiles(),

