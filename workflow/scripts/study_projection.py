"""Snakemake script of rule study_projection: the study's four sweeps projected with the committed calibration,
their cost and the study's figures from them (calorimeter.reproduce.study)."""

import sys
from pathlib import Path

from calorimeter.reproduce.study import project_study

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
done = project_study(Path(sm.output.readme).parent, Path(sm.input.calibration).parent, sm.config["results_dir"],
                     root=Path.cwd())
for s in done:
    print(f"{s.file}: {dict(s.rows['status'].value_counts())}; {s.cost.lines()[0]}", file=sys.stderr)
