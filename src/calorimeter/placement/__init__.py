"""Thermal-aware placement: node thermal profiles, placement policies, and their in-job application.

* :mod:`~calorimeter.placement.profile`: a host's thermal profile (per GPU, by UUID: sustained SM clock,
  temperature, power, throttle shares under a load) built from recorded telemetry, its freshness rules and store.
* :mod:`~calorimeter.placement.policy`: the policies (``default``, ``balanced``, ``thermal``): stage costs,
  rank-to-GPU mapping and layer split, as pure functions of the cell, the model and the profiles.
* :mod:`~calorimeter.placement.apply`: the decision inside the job (the host is known only there) and how it is
  applied (CUDA device order) and verified.
* :mod:`~calorimeter.placement.calibrate`: the ``thermal-calibration`` cell kind, a short standard load on every GPU.

See docs/placement.md.
"""
