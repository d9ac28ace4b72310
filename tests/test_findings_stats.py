"""The comparison core (findings/stats.py): effects with intervals, degrees of freedom and units, bounded scales,
Welch differences and ratios, and the symmetric verdict rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from calorimeter.findings.stats import (
    AGREES,
    CANNOT_SAY,
    DISAGREES,
    PARTLY,
    Claim,
    Effect,
    mean_interval,
    paired,
    verdict,
    welch,
    within_slope,
)


def eff(value: float, low: float, high: float, dof: float = 5.0) -> Effect:
    return Effect(value, low, high, n=int(dof) + 1, method="test", dof=dof, unit="repetitions")


def test_mean_interval_matches_scipy_and_names_its_unit() -> None:
    x = [1.0, 2.0, 4.0, 7.0]
    e = mean_interval(x, what="repetitions")
    lo, hi = stats.t.interval(0.95, 3, loc=np.mean(x), scale=stats.sem(x))
    assert (e.value, e.low, e.high, e.n, e.dof, e.unit) == pytest.approx((3.5, lo, hi, 4, 3, "repetitions"))
    one = mean_interval([3.0])
    assert not one.has_interval and one.value == 3.0 and one.dof == 0


def test_shares_and_ratios_stay_in_bounds() -> None:
    share = mean_interval([0.665, 0.427], scale="logit")  # the review's [-0.96, 2.06] on the linear scale
    assert 0 < share.low < share.value < share.high < 1 and share.scale == "logit"
    ratio = mean_interval([0.2, 3.0, 0.05], scale="log")
    assert 0 < ratio.low < ratio.value < ratio.high
    assert math.isnan(mean_interval([0.5, 1.2], scale="logit").value)  # a share above 1 is no share


def test_welch_difference_and_ratio() -> None:
    a, b = [10.0, 11.0, 12.0], [7.0, 9.0, 8.5]
    d = welch(a, b)
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (d.value, d.low, d.high) == pytest.approx((np.mean(a) - np.mean(b), ci.low, ci.high))
    r = welch(a, b, ratio=True)
    assert r.value == pytest.approx(np.mean(a) / np.mean(b)) and 0 < r.low < r.value < r.high and r.scale == "log"
    assert 2 <= r.dof <= 4
    assert not welch([1.0], [2.0, 3.0]).has_interval
    assert math.isnan(welch([-1.0, -2.0], [1.0, 2.0], ratio=True).value)


def test_welch_dof_is_welch_satterthwaite() -> None:
    a, b = np.array([10.0, 11.0, 12.0, 10.5]), np.array([7.0, 9.0, 8.5])
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    dof = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    d = welch(a, b)
    assert d.dof == pytest.approx(dof)
    assert d.high - d.value == pytest.approx(stats.t.ppf(0.975, dof) * math.sqrt(va + vb))


def test_paired_uses_common_repetition_indices() -> None:
    e = paired({0: 10.0, 1: 12.0, 2: 11.0, 3: 99.0}, {0: 9.0, 1: 10.0, 2: 10.5})
    assert e.n == 3 and e.dof == 2 and e.value == pytest.approx((1 + 2 + 0.5) / 3) and e.unit == "paired repetitions"
    r = paired({0: 2.0, 1: 4.0}, {0: 1.0, 1: 2.0}, ratio=True)
    assert r.value == pytest.approx(2.0) and r.scale == "log"


def test_within_slope_has_dof() -> None:
    x = np.log2([1, 2, 4, 8] * 2)
    e = within_slope([(x, 5 * x + np.array([0, 1, -1, 0, 1, 0, 0, -1]))])
    assert e.dof == x.size - 1 - 1 and e.low < 5 < e.high


def test_direction_claims_are_judged_symmetrically_around_the_tolerance() -> None:
    c = Claim(sign=+1, tolerance=1.0)
    assert verdict(eff(3, 2, 4), c).verdict == AGREES
    assert verdict(eff(1.5, 0.5, 2.5), c).verdict == CANNOT_SAY  # straddles the tolerance: the old rule said agrees
    assert verdict(eff(0.3, 0.1, 0.5), c).verdict == DISAGREES  # an effect, but smaller than the claim could mean
    assert verdict(eff(-3, -4, -2), c).verdict == DISAGREES
    assert "opposite" in verdict(eff(-3, -4, -2), c).why
    down = Claim(sign=-1, null=1.0, tolerance=0.02)
    assert verdict(eff(0.9, 0.85, 0.95), down).verdict == AGREES
    assert verdict(eff(1.1, 1.05, 1.15), down).verdict == DISAGREES


def test_claims_with_a_size_agree_only_inside_the_size() -> None:
    c = Claim(sign=+1, null=1.0, tolerance=0.02, size=(3.0, math.inf))  # FSDP mb 1 -> 4: > 3x
    assert verdict(eff(3.4, 3.1, 3.8), c).verdict == AGREES
    j = verdict(eff(3.0, 2.5, 3.5), c)  # straddles the size's edge: overlap is not agreement
    assert (j.verdict, j.undecided) == (CANNOT_SAY, "size")
    assert verdict(eff(1.9, 1.1, 3.05), c).undecided == "size"  # the review's case that read "agrees"
    assert verdict(eff(2.18, 1.9, 2.5), c).verdict == PARTLY  # the review's 2.18x: direction yes, size no
    assert verdict(eff(0.9, 0.85, 0.95), c).verdict == DISAGREES  # the other direction
    j = verdict(eff(1.5, 0.99, 2.9), c)  # size excluded, direction undecided: not "disagrees" (the review's case)
    assert (j.verdict, j.undecided) == (CANNOT_SAY, "direction") and "excludes the stated size" in j.why
    assert verdict(eff(1.5, 1.03, 2.9), c).verdict == PARTLY  # surer about the direction: a verdict, not a softer one
    assert verdict(eff(2.0, 0.9, 4.0), c).verdict == CANNOT_SAY
    up_to = Claim(sign=+1, tolerance=2.0, size=(0.0, 27.0))  # asymmetry "up to 27%"
    assert verdict(eff(9.0, 8.4, 9.6), up_to).verdict == AGREES
    assert verdict(eff(40.0, 35.0, 45.0), up_to).verdict == PARTLY  # hotter than the study's "up to"
    assert verdict(eff(27.0, 20.0, 34.0), up_to).undecided == "size"


def test_a_size_out_of_the_regime_is_never_judged() -> None:
    c = Claim(sign=+1, null=1.0, tolerance=0.02, size=(10.0, math.inf))  # LoRA >= 10x on one GPU
    j = verdict(eff(1.86, 1.84, 1.89), c, regime="one GPU at equal sequence length")
    assert (j.verdict, j.undecided) == (CANNOT_SAY, "regime")
    assert "one GPU" in j.why and "direction agrees" in j.why
    assert verdict(eff(1.86, 1.84, 1.89), c).verdict == PARTLY  # in its regime the same interval excludes the size
    no_size = Claim(sign=+1, tolerance=1.0)
    assert verdict(eff(3, 2, 4), no_size, regime="ignored without a size").verdict == AGREES


# ---------------------------------------------------------------------------------------------------------------
# properties of the rule, on exhaustive grids of intervals (values on a binary grid: mirroring is exact)

GRID = [x / 4 for x in range(-20, 21)]  # -5 .. 5 in quarters
CLAIMS = {
    "above": Claim(sign=+1, tolerance=1.0),
    "below": Claim(sign=-1, tolerance=1.0),
    "above, no tolerance": Claim(sign=+1),
    "more than 3": Claim(sign=+1, tolerance=0.5, size=(3.0, math.inf)),
    "less than -3": Claim(sign=-1, tolerance=0.5, size=(-math.inf, -3.0)),
    "up to 2.5": Claim(sign=+1, tolerance=0.5, size=(0.0, 2.5)),
    "between 1.5 and 3": Claim(sign=+1, tolerance=0.5, size=(1.5, 3.0)),
    "equal within 1": Claim(sign=0, tolerance=1.0),
}


def _intervals() -> list[tuple[float, float]]:
    return [(lo, hi) for i, lo in enumerate(GRID) for hi in GRID[i:]]


def _mirror(c: Claim) -> Claim:
    size = None if c.size is None else (-c.size[1], -c.size[0])
    return Claim(sign=-c.sign, null=-c.null, tolerance=c.tolerance, size=size)


@pytest.mark.parametrize("name", list(CLAIMS))
def test_narrowing_an_interval_never_changes_a_decided_verdict(name: str) -> None:
    """Every interval inside a decided one gets the same verdict; inside one that straddles only the size's edge
    (the direction holds), never *disagrees* or a straddled direction."""
    c, ivs = CLAIMS[name], _intervals()
    judged = {iv: verdict(eff((iv[0] + iv[1]) / 2, *iv), c) for iv in ivs}
    for (lo, hi), outer in judged.items():
        inner = [judged[(a, b)] for a, b in ivs if lo <= a and b <= hi]
        if outer.verdict != CANNOT_SAY:
            assert {j.verdict for j in inner} == {outer.verdict}, (name, lo, hi, outer)
        elif outer.undecided == "size":
            assert not {j.undecided for j in inner} & {"direction"} and DISAGREES not in {j.verdict for j in inner}


@pytest.mark.parametrize("name", list(CLAIMS))
def test_mirrored_data_gets_the_mirrored_verdict(name: str) -> None:
    c = CLAIMS[name]
    for lo, hi in _intervals():
        a = verdict(eff((lo + hi) / 2, lo, hi), c)
        b = verdict(eff(-(lo + hi) / 2, -hi, -lo), _mirror(c))
        assert (a.verdict, a.undecided) == (b.verdict, b.undecided), (name, lo, hi)


@pytest.mark.parametrize("name", list(CLAIMS))
def test_every_verdict_of_a_claim_is_reachable(name: str) -> None:
    c = CLAIMS[name]
    seen = {verdict(eff((lo + hi) / 2, lo, hi), c).verdict for lo, hi in _intervals()}
    expected = {AGREES, DISAGREES, CANNOT_SAY} | ({PARTLY} if c.size is not None else set())
    assert seen == expected


def test_no_verdict_under_two_degrees_of_freedom_or_without_an_interval() -> None:
    c = Claim(sign=-1, tolerance=15.0)
    one_dof = eff(-148, -294, -2.3, dof=1)  # the review's deep-pipeline clock slope
    assert verdict(one_dof, c).verdict == CANNOT_SAY and "degree" in verdict(one_dof, c).why
    assert verdict(Effect(2.0, n=1, method="one"), c).verdict == CANNOT_SAY
    assert verdict(None, c).verdict == CANNOT_SAY
    v, why, undecided = verdict(Effect(math.nan, method="no pair"), c)  # unpacks as (verdict, why, undecided)
    assert v == CANNOT_SAY and "no pair" in why and undecided == "data"


def test_equality_claims_for_reproductions() -> None:
    same = Claim(sign=0, null=1.0, tolerance=0.03)
    assert verdict(welch([100.0, 100.4, 99.7], [99.0, 99.5, 99.2], ratio=True), same).verdict == AGREES
    assert verdict(welch([100.0, 101.0, 99.5], [80.0, 81.0, 79.5], ratio=True), same).verdict == DISAGREES
    assert verdict(welch([100.0, 110.0, 90.0], [98.0, 99.0, 98.5], ratio=True), same).verdict == CANNOT_SAY


def test_claims_are_validated() -> None:
    with pytest.raises(ValueError, match="sign"):
        Claim(sign=2)
    with pytest.raises(ValueError, match="tolerance"):
        Claim(sign=1, tolerance=-1.0)
