# ---- train: one job per planned cell, launched through submitit (local processes or SLURM) ----
#
# A local rule in every mode: on a cluster it submits the cell's job through submitit and waits (submitit owns
# requeue on preemption; see docs/slurm.md). Site settings (partition, account, QoS, constraint, time) come from the
# profile's resources for this rule (profiles/slurm/config.yaml), never from here. Launcher settings are not params,
# so moving a sweep to another executor, partition or site never re-measures finished cells.


rule train:
    input:
        placement=get_placement_inputs,
    output:
        run=str(CELL_FILES.run_json),
    params:
        # The whole cell: a changed value reruns exactly the cells it changes (rerun trigger `params`).
        cell=lambda wc: get_cell(wc).cell.to_dict(),
        estimates=lambda wc: get_cell(wc).estimates,
        cell_dir=lambda wc: str(CellPaths.of(RESULTS, wc.sweep, wc.cell).root),
    log:
        str(SWEEP_FILES.log("train/{cell}")),
    # A local cell has the machine to itself: a measurement must not share GPUs, cores or the power budget with
    # another cell. Under SLURM the profile sets this rule's threads to 0 (set-threads): it only waits on its job.
    threads: workflow.cores
    # the plan's order: repetitions interleaved in time (every cell's first run before any second one, shuffled per
    # repetition); within a repetition a layout's default placement before its other policies, which fit their
    # stage costs to its kernel times (docs/placement.md)
    priority: lambda wc: -CELL_ORDER[wc.cell]
    resources:
        runtime=PLAN.settings.timeout_min,
        # one per cell waiting on its job: cap concurrent cells with --resources slurm_slots=N
        slurm_slots=1,
        # for the message (and snakemake -n): the projected wall time, which no rerun trigger sees
        projected_wall=lambda wc: COST_OF_CELL[wc.cell].sentence(),
    localrule: True
    message:
        "train {wildcards.cell} ({resources.projected_wall})"
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/train_cell.py"


# ---- thermal_profile: a recorded cell's hosts profiled from its tables (docs/placement.md) ----
#
# From the tables rule cell_tables computed (never again in the job); the profiles go to <results_dir>/thermal-profiles/,
# this rule's output says what the cell gave (or why nothing). A thermal cell's train job waits for its sweep's
# calibration cells' profiles (get_placement_inputs).


rule thermal_profile:
    input:
        run=str(CELL_FILES.run_json),
        runs=str(CELL_FILES.table("runs")),
        gpus=str(CELL_FILES.table("gpus")),
    output:
        str(CELL_FILES.thermal_profile),
    log:
        str(SWEEP_FILES.log("thermal_profile/{cell}")),
    localrule: True
    conda:
        "../../envs/calorimeter.yaml"
    script:
        "../scripts/thermal_profile.py"


rule records:
    # `snakemake records`: train every runnable cell that has no record and stop there (no tables, no figures): what
    # a GPU node runs when its records are aggregated elsewhere (bench/gpu/run_reference.sh). Not `--until train`:
    # Snakemake 9.27 then never schedules a train job that waits on another (a thermal cell on its calibration).
    input:
        get_cell_records(),
    localrule: True
