"""Thermal-aware placement inside the job: node thermal profiles and the in-job application of a policy.

The policies themselves (``default``, ``balanced``, ``thermal``: stage costs, rank-to-GPU mapping and layer split,
pure functions of the cell, the model and the profiles) are plan-time code: :mod:`calorimeter.plan.placement`. The
comparison of policies over recorded cells is analysis: :mod:`calorimeter.analysis.placement`.

* :mod:`~calorimeter.placement.profile`: a host's thermal profile (per GPU, by UUID: sustained SM clock,
  temperature, power, throttle shares under a load) built from recorded telemetry, its freshness rules and store.
* :mod:`~calorimeter.placement.apply`: the decision inside the job (the host is known only there) and how it is
  applied (CUDA device order) and verified.
* :mod:`~calorimeter.placement.calibrate`: the ``thermal-calibration`` cell kind, a short standard load on every GPU.

See docs/placement.md.
"""
