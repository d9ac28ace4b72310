"""Launching cells: submitit executors (local processes or SLURM) and the per-rank distributed setup."""
