"""What each verdict needs on a given noise (calorimeter.findings.reach): the smallest effects agree with the rule
itself, on every scale."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from calorimeter.findings.reach import half_width, machine_sd, pooled_sd, reach
from calorimeter.findings.stats import AGREES, CANNOT_SAY, DISAGREES, PARTLY, Claim, Effect, verdict


def _at(value: float, half: float, scale: str, dof: int) -> Effect:
    """An effect with point estimate ``value`` and the given half width on ``scale``."""
    to, back = {"linear": (lambda x: x, lambda z: z), "log": (math.log, math.exp)}[scale]
    return Effect(value, back(to(value) - half), back(to(value) + half), dof + 1, "t", dof, "repetitions", scale)


def test_half_width_is_the_t_interval() -> None:
    assert half_width(2.0, 5) == pytest.approx(stats.t.ppf(0.975, 4) * 2.0 / math.sqrt(5))
    assert half_width(2.0, 1) == math.inf


@pytest.mark.parametrize(("claim", "scale", "sd"), [
    (Claim(-1, 0.0, 15.0), "linear", 7.88),  # a clock: lower is the claimed side
    (Claim(+1, 1.0, 0.02, size=(3.0, math.inf)), "log", 0.0063),  # FSDP's > 3x
    (Claim(+1, 0.0, 2.0, size=(0.0, 27.0)), "linear", 1.62),  # asymmetry up to 27%
])
def test_the_thresholds_are_where_the_verdict_changes(claim: Claim, scale: str, sd: float) -> None:
    for n in (3, 5):
        r = reach(claim, scale, sd, n, lambda x: f"{x!r}")
        h = r.half
        agree_edge = float(r.agrees.split()[-1] if r.agrees.startswith((">", "<")) else r.agrees.split(" to ")[0])
        dis_edge = float(r.disagrees.split()[1])
        step = 1e-6 * max(1.0, abs(agree_edge))
        inward = -claim.sign * step  # a little short of the agree threshold
        assert verdict(_at(agree_edge - inward, h, scale, n - 1), claim).verdict == AGREES
        assert verdict(_at(agree_edge + inward, h, scale, n - 1), claim).verdict in (CANNOT_SAY, PARTLY)
        assert verdict(_at(dis_edge + inward, h, scale, n - 1), claim).verdict == DISAGREES
        assert verdict(_at(dis_edge - inward, h, scale, n - 1), claim).verdict == CANNOT_SAY


def test_noise_is_pooled_within_configuration_and_machine() -> None:
    v = pd.DataFrame({"group": ["a", "a", "a", "b", "b", "c"], "value": [1.0, 2.0, 3.0, 10.0, 12.0, 99.0]})
    sd, dof, k = pooled_sd(v, "linear")  # c has one repetition: no spread to pool
    assert (dof, k) == (3, 2) and sd == pytest.approx(math.sqrt((2.0 + 2.0) / 3))
    e = Effect(10.0, 8.0, 12.0, 7, "t", 6, "machines")
    assert machine_sd(e.value, e.low, e.high, e.dof, "linear") == pytest.approx(2.0 * math.sqrt(7) /
                                                                                stats.t.ppf(0.975, 6))
