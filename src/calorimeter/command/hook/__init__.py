"""The folder a ``command`` cell's rank 0 puts first on PYTHONPATH: its ``sitecustomize`` reports what each Python
process of the command imported (:mod:`calorimeter.command.provenance`)."""
