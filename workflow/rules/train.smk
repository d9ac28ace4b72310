# ---- train: one job per planned cell, launched through submitit (local processes or SLURM) ----


rule train:
    output:
        run=f"{RESULTS}/{{sweep}}/cells/{{cell}}/run.json",
    params:
        # The whole cell: a changed value reruns exactly the cells it changes (rerun trigger `params`).
        cell=lambda wc: get_cell(wc).cell.to_dict(),
        estimates=lambda wc: get_cell(wc).estimates,
        launcher=PLAN.launcher,
        cell_dir=lambda wc: f"{RESULTS}/{wc.sweep}/cells/{wc.cell}",
    log:
        f"{RESULTS}/{{sweep}}/logs/train/{{cell}}.log",
    threads: lambda wc: get_cell(wc).cell.world_size if PLAN.launcher["executor"] == "local" else 1
    resources:
        runtime=PLAN.launcher["timeout_min"],
    message:
        "train {wildcards.cell}"
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/train_cell.py"
