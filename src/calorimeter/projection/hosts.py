"""The machine a measured cell ran on, and how fast its host issues work: a factor per machine on the host times of the
host-bound regime (launch floor, ZeRO-3 host time, host gaps), fitted together with them.

Why: in the host-bound regime the iteration lasts as long as the host takes to issue it, and hosts differ: one
host-bound configuration took 0.72 to 1.07 s per iteration on four 2x H200 machines, and neither the warm-up protocol
nor the node sampler explains it (docs/projection.md, "Host speed per machine"). The machines name their CPU alike,
with no clock, so the record's CPU model cannot tell them apart; the machine's own host-bound cells can. (Records time
the host too, ``host_cpu.dispatch_us_per_op`` (:func:`calorimeter.records.provenance.host_dispatch`), and sample the
CPU time the hypervisor stole: neither predicted a run's pace, so they are not used here.) The host times and these
factors are fitted over every GPU type that ran the same software
(:func:`calorimeter.projection.calibration.host_bound_elsewhere`).

A machine is told apart by its GPUs' UUIDs (:func:`calorimeter.records.machines.machine_keys`) and named by the
smallest of them (``GPU-717f66b6``); the names are given once to all loaded cells
(:func:`calorimeter.projection.measured.load_measured`), so a calibration on a subset keeps them. A machine's factor
is the geometric mean over its host-bound configurations (each the mean of its repetitions there) of measured over
modelled host time, shrunk toward 1 (an average machine) by :data:`SHRINK` pseudo-configurations: the repetition
noise of a host-bound cell on one machine (mostly 5-12%, once 30%) against the spread between machines (up to 1.5x)
puts one configuration's worth of evidence at about four times the prior's weight. A projection for a machine with
no host-bound cell in its calibration takes 1 and says so.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

#: pseudo-cells at factor 1 added to every machine's mean log ratio (repetition variance / between-machine variance)
SHRINK = 0.25
#: alternations of coefficient fit and machine factors
ROUNDS = 4


def fit_factors(log_ratio: list[float], machines: list[str | None], shrink: float = SHRINK,
                configs: list[str] | None = None) -> dict[str, float]:
    """Per machine, ``exp(sum(log ratio) / (n + shrink))`` with ``n`` its configurations and each configuration's log
    ratio the mean over its repetitions on that machine (rows without a machine are left out; ``configs`` None: every
    row its own configuration), then divided by their geometric mean over the rows so that the fitted coefficients
    describe an average machine.

    The unit of evidence is the configuration, not the run: repetitions of one configuration on one machine tell how
    fast that configuration is there, not how fast the machine is. Counted as rows, a machine's two runs of its only
    host-bound configuration set its factor almost alone and moved the shared launch coefficients (tokens/s max error
    29% -> 45%: docs/projection.md, "Machine factors over configurations")."""
    units: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i, (r, m) in enumerate(zip(log_ratio, machines, strict=True)):
        if m is not None and math.isfinite(r):
            units[m][configs[i] if configs is not None else str(i)].append(r)
    logf = {m: sum(float(np.mean(v)) for v in by.values()) / (len(by) + shrink) for m, by in units.items()}
    rows = [logf[m] for m in machines if m in logf]
    centre = float(np.mean(rows)) if rows else 0.0
    return {m: float(math.exp(v - centre)) for m, v in logf.items()}


__all__ = ["ROUNDS", "SHRINK", "fit_factors"]
