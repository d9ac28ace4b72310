"""The ``collectives`` cell kind: measured bandwidth/latency curves of the collectives training uses.

A cell of kind ``collectives`` runs on a node like any cell (same launcher, same telemetry) but, instead of training,
times all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over message sizes and group sizes
(:mod:`~calorimeter.collectives.measure`) and writes one compact table, ``collectives.parquet``, into the cell
folder (:mod:`~calorimeter.collectives.table`). The projection (:mod:`calorimeter.projection`) reads these curves
in place of the ones it derives from kernel traces.
"""
