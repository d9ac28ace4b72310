"""Cell records: run.json (resolved config, status, metrics, provenance) and steps.parquet, written atomically."""
