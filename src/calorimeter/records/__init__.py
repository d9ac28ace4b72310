"""Cell records: run.json (resolved config, status, metrics, provenance) and steps.parquet, written atomically and
read through one door (:mod:`~calorimeter.records.run_record`); the per-rank contract of every cell kind
(:mod:`~calorimeter.records.rank`); file names (:mod:`~calorimeter.records.paths`)."""
