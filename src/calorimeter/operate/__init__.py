"""Operating a sweep: where each cell stands (``calorimeter status``) and rerunning what failed
(``calorimeter rerun``), from the files of the result folder and the scheduler alone (no Snakemake needed)."""
