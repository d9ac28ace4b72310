# ---- compare: this sweep checked against the reference it reproduces (calorimeter compare, docs/artifact.md) ----
#
#   snakemake compare --configfile config/reference/h100x1-findings.yaml \
#       --config results_dir=results/repro reference=results/reference/findings-2026-11-23/h100x1-findings
#
#   results/<sweep>/compare/compare.csv          per configuration and metric: difference, tolerance, verdict
#   results/<sweep>/compare/compare_counts.csv   verdicts per figure and overall
#   results/<sweep>/compare/compare.html|.png    the report's "Reproduction" section and the overlay figure
# The rule fails (after writing everything) unless every comparable metric is reproduced and no reference configuration
# is missing (docs/artifact.md: verdicts; the noise model is this checkout's config/compare-noise.json).


rule compare:
    input:
        runs=str(sweep_paths().table("runs")),
    output:
        csv=report(compare_outputs()["compare.csv"], caption="../report/compare.rst", category="Reproduction"),
        counts=compare_outputs()["compare_counts.csv"],
        html=report(compare_outputs()["compare.html"], caption="../report/compare.rst", category="Reproduction"),
        png=report(compare_outputs()["compare.png"], caption="../report/compare.rst", category="Reproduction"),
    params:
        reference=config.get("reference", ""),
        noise=os.path.join(workflow.basedir, "config", "compare-noise.json"),
    log:
        str(sweep_paths().log("compare")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/compare.py"
