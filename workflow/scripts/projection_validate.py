"""Snakemake script of rule projection_validate: predict every held-out measured cell of each fold."""

import json
import sys
from pathlib import Path

from calorimeter.projection.validation import Fold, summarize, validate, write_validation
from calorimeter.records.atomic import write_atomic

sm = snakemake  # noqa: F821 - injected by Snakemake
sys.stderr = open(sm.log[0], "w", buffering=1)  # noqa: SIM115
folds = [Fold.from_dict(f) for f in sm.params.folds]
table = validate(folds) if folds else None
if table is None or table.empty:
    import pandas as pd

    table = pd.DataFrame(columns=["fold", "cell_id", "notes"])
write_validation(table, sm.output.table)
summary = summarize(table) if len(table) else {}
text = json.dumps(summary, indent=1, default=float)
write_atomic(Path(sm.output.summary), lambda tmp: tmp.write_text(text))
print(json.dumps(summary, indent=1, default=float), file=sys.stderr)
