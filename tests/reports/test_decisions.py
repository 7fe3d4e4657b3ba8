"""The decision rule: matches / better / worse / inconclusive on the interval of a difference
against a margin, and the best named only when it is separable from every other arm."""

import pytest

from lbtrain.reports.decisions import (
    BELOW_THE_BEST,
    BEST,
    BETTER,
    DEFAULT_MARGIN,
    INCONCLUSIVE,
    MATCHES,
    TIED_WITH_THE_BEST,
    WORSE,
    claim,
    claim_from_interval,
    few_seeds,
    standing,
)
from lbtrain.reports.statistics import Estimate, difference_interval


def test_the_default_margin_is_one_point_of_a_fractional_accuracy():
    assert DEFAULT_MARGIN == 0.01


@pytest.mark.parametrize("low, high, expected", [
    (-0.009, 0.004, MATCHES),      # whole interval above -1 point: non-inferior
    (0.002, 0.030, MATCHES),       # above 0 but not above +1 point: matches, not better
    (0.011, 0.030, BETTER),        # whole interval above +1 point
    (-0.030, -0.011, WORSE),       # whole interval below -1 point
    (-0.025, -0.004, INCONCLUSIVE),  # Goyal's "reproduced up to 128": -1.2 [-2.5, -0.4]
    (-0.020, 0.020, INCONCLUSIVE),  # too wide to say
    (-0.010, 0.004, INCONCLUSIVE),  # touching -margin has not cleared it
    (0.010, 0.030, MATCHES),       # touching +margin is not better
    (-0.030, -0.010, INCONCLUSIVE),  # touching -margin from below is not worse
    (None, None, INCONCLUSIVE),    # no interval, no claim
])
def test_the_claim_on_an_interval(low, high, expected):
    assert claim_from_interval(low, high) == expected


def test_better_and_worse_are_symmetric_when_the_arms_swap():
    for low, high in [(0.011, 0.03), (-0.03, -0.011), (-0.005, 0.02), (-0.02, 0.02), (0.02, 0.05)]:
        forward, backward = claim_from_interval(low, high), claim_from_interval(-high, -low)
        assert (forward == BETTER) == (backward == WORSE)


def test_the_margin_is_stated_and_checked():
    assert claim_from_interval(-0.015, 0.0, margin=0.02) == MATCHES
    assert claim_from_interval(-0.015, 0.0, margin=0.01) == INCONCLUSIVE
    assert claim_from_interval(0.001, 0.002, margin=0.0) == BETTER
    with pytest.raises(ValueError, match="margin"):
        claim_from_interval(0.0, 0.1, margin=-0.01)
    with pytest.raises(ValueError, match="low bound"):
        claim_from_interval(0.1, 0.0)


def test_claims_on_welch_intervals_of_seeds():
    reference = [0.860, 0.858, 0.857]
    assert claim(difference_interval([0.861, 0.859, 0.860], reference)) == MATCHES
    assert claim(difference_interval([0.830, 0.829, 0.831], reference)) == WORSE
    assert claim(difference_interval([0.890, 0.889, 0.891], reference)) == BETTER
    assert claim(difference_interval([0.86], reference)) == INCONCLUSIVE  # one seed: no interval
    assert claim(difference_interval([], reference)) == INCONCLUSIVE
    assert claim(None) == INCONCLUSIVE
    assert claim(Estimate(-0.012, -0.025, -0.004, 3)) == INCONCLUSIVE


def test_two_seeds_on_a_side_decide_nothing_however_far_apart():
    reference = [0.860, 0.858, 0.857]
    two = difference_interval([0.700, 0.702], reference)
    assert two.high < -0.1 and two.df < 3  # Welch's interval (df 2.4) clears the margin by far: still no claim
    assert claim(two) == INCONCLUSIVE and claim(difference_interval([0.700, 0.702, 0.701], reference)) == WORSE
    assert claim(difference_interval(reference, [0.700, 0.702])) == INCONCLUSIVE  # two on the reference's side
    assert few_seeds(two) and not few_seeds(difference_interval([0.700, 0.702, 0.701], reference))


def test_a_best_is_named_only_when_separable_from_every_other_arm():
    separable = {"a": [0.80, 0.81, 0.82], "b": [0.70, 0.71, 0.72], "c": [0.60, 0.62, 0.61]}
    assert standing(separable) == {"a": BEST, "b": BELOW_THE_BEST, "c": BELOW_THE_BEST}
    # b's difference from a contains 0: both are tied with the best, c is still below.
    tied = {"a": [0.80, 0.81, 0.82], "b": [0.79, 0.81, 0.83], "c": [0.60, 0.62, 0.61]}
    assert standing(tied) == {"a": TIED_WITH_THE_BEST, "b": TIED_WITH_THE_BEST, "c": BELOW_THE_BEST}
    # One seed has no interval: nothing separates it from the top.
    assert standing({"a": [0.80, 0.81, 0.82], "b": [0.5]}) == {"a": TIED_WITH_THE_BEST, "b": TIED_WITH_THE_BEST}
    assert standing({"a": [0.8], "b": []}) == {"a": BEST}
    assert standing({}) == {}
