"""Claims from intervals: the one decision rule every report, table and anchor uses.

Accuracies are fractions in [0, 1] throughout lbtrain, so the default margin ``DEFAULT_CLAIM_MARGIN
= 0.01`` is 1 point of accuracy (a claim's margin; a run's collapse margin is another fact,
``lbtrain.verdict.DEFAULT_COLLAPSE_MARGIN``). Let ``[low, high]`` be the interval (95% by default:
``lbtrain.reports.statistics.difference_interval``, Welch 1947) of the difference *arm −
reference* and ``m >= 0`` the margin. The claim is

- ``better`` when ``low > +m``: the whole interval lies above +m (superior by more than the
  margin; the rule is symmetric, so A is ``better`` than B exactly when B is ``worse`` than A);
- ``matches`` when ``-m < low <= +m``: the whole interval lies above −m, a non-inferiority test
  (one side of Schuirmann's 1987 two one-sided tests, TOST). It says the arm loses less than
  the margin; it may still be better by less than the margin;
- ``worse`` when ``high < -m``: the whole interval lies below −m (inferior by more than the
  margin);
- ``inconclusive`` otherwise, and whenever there is no interval (a single seed, no ok run) or it
  rests on fewer than ``MIN_CLAIM_SEEDS`` (3) values on a side (``few_seeds``): two seeds on a
  side leave a Welch df of 1 to 3 (at df 1 the interval is 12.7 standard errors wide), a number,
  not a bound, so no claim rests on it (``lbtrain scale``'s answer and the results page show no
  interval there; ``lbtrain report`` and ``compare`` show it and say why there is no claim).

Inequalities are strict: an interval that touches ±m has not cleared it. With a two-sided
``level`` interval each bound is a one-sided test at ``(1 − level) / 2`` (2.5% for 95%), as
TOST's with a ``1 − 2α`` interval; the reports use the 95% interval they print beside the word,
so every claim can be checked against the numbers shown.

Among several arms (``standing``): the *top* arm is the one with the highest mean. Another arm
is ``tied with the best`` when the interval of its difference from the top contains 0
(``low <= 0 <= high``, or there is no interval); the top arm is named ``best`` only when it is
separable from every other arm (no arm tied with it), else it is ``tied with the best`` too.
Arms separable from the top are ``below the best``. A standing ranks arms to choose one (the
answer's arm to use, the advisor's recipe); it is not a claim, and separates arms on two seeds
too when their Welch interval excludes 0.

Pure functions of numbers: no TensorFlow, no files.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from lbtrain.config.experiment import MIN_PROTOCOL_SEEDS
from lbtrain.reports.statistics import DEFAULT_LEVEL, Estimate, difference_interval

DEFAULT_CLAIM_MARGIN = 0.01
DEFAULT_MARGIN = DEFAULT_CLAIM_MARGIN  # its name before DEFAULT_CLAIM_MARGIN, kept importable

BETTER = "better"
MATCHES = "matches"
WORSE = "worse"
INCONCLUSIVE = "inconclusive"
CLAIMS = (BETTER, MATCHES, WORSE, INCONCLUSIVE)

# The fewest values on each side of an estimate a claim rests on: the protocol's finals' minimum.
MIN_CLAIM_SEEDS = MIN_PROTOCOL_SEEDS

BEST = "best"
TIED_WITH_THE_BEST = "tied with the best"
BELOW_THE_BEST = "below the best"


def claim_from_interval(low: float | None, high: float | None, margin: float = DEFAULT_CLAIM_MARGIN) -> str:
    """The claim (module doc) on the interval ``[low, high]`` of arm − reference.

    >>> claim_from_interval(-0.025, -0.004)
    'inconclusive'
    >>> claim_from_interval(-0.008, 0.02), claim_from_interval(0.012, 0.03), claim_from_interval(-0.05, -0.02)
    ('matches', 'better', 'worse')

    Raises:
      ValueError: a negative margin, or ``low > high``.
    """
    if not margin >= 0:
        raise ValueError(f"the margin must be 0 or more, got {margin!r}")
    if low is None or high is None:
        return INCONCLUSIVE
    if low > high:
        raise ValueError(f"an interval's low bound {low!r} is above its high bound {high!r}")
    if low > margin:
        return BETTER
    if low > -margin:
        return MATCHES
    if high < -margin:
        return WORSE
    return INCONCLUSIVE


def few_seeds(estimate: Estimate | None) -> bool:
    """Whether ``estimate`` (a mean, or a difference of two) rests on fewer than
    ``MIN_CLAIM_SEEDS`` values on a side (module doc).

    >>> few_seeds(Estimate(0.01, -0.2, 0.2, 2, df=1.0, n_second=5)), few_seeds(Estimate(0.01, 0.0, 0.02, 3, df=3.9, n_second=3))
    (True, False)
    """
    return estimate is not None and estimate.mean is not None and min(estimate.n, estimate.n_second or estimate.n) < MIN_CLAIM_SEEDS


def claim(difference: Estimate | None, margin: float = DEFAULT_CLAIM_MARGIN) -> str:
    """``claim_from_interval`` on an estimate of arm − reference; ``inconclusive`` for no
    estimate, and on fewer than ``MIN_CLAIM_SEEDS`` values on a side (``few_seeds``).

    >>> claim(Estimate(-0.30, -0.31, -0.29, 3, df=4.0, n_second=3)), claim(Estimate(-0.30, -0.31, -0.29, 2, df=2.0, n_second=3))
    ('worse', 'inconclusive')
    """
    if difference is None or difference.mean is None or few_seeds(difference):
        return INCONCLUSIVE
    return claim_from_interval(difference.low, difference.high, margin)


def contains_zero(difference: Estimate) -> bool:
    """Whether the interval of a difference contains 0; True where there is no interval (nothing
    separates the two)."""
    if difference.low is None or difference.high is None:
        return True
    return difference.low <= 0 <= difference.high


def standing(groups: Mapping[str, Sequence[float]], *, level: float = DEFAULT_LEVEL) -> dict[str, str]:
    """Each group's standing against the top group (module doc): ``best``, ``tied with the
    best`` or ``below the best``, by Welch intervals of each group minus the top group. Groups
    without a value are left out; ties on the mean go to the first group.

    >>> standing({"a": [0.80, 0.81, 0.82], "b": [0.70, 0.71, 0.72]})
    {'a': 'best', 'b': 'below the best'}
    >>> standing({"a": [0.80, 0.81, 0.82], "b": [0.79, 0.81, 0.83]})
    {'a': 'tied with the best', 'b': 'tied with the best'}
    """
    finite = {name: [float(v) for v in values if v is not None and math.isfinite(float(v))] for name, values in groups.items()}
    measured = {name: values for name, values in finite.items() if values}
    if not measured:
        return {}
    means = {name: math.fsum(values) / len(values) for name, values in measured.items()}
    top = max(means, key=lambda name: means[name])
    result = {name: (TIED_WITH_THE_BEST if contains_zero(difference_interval(values, measured[top], level=level))
                     else BELOW_THE_BEST) for name, values in measured.items() if name != top}
    result[top] = TIED_WITH_THE_BEST if TIED_WITH_THE_BEST in result.values() else BEST
    return {name: result[name] for name in measured}


# The one-sided level of every claim on the page: each bound of a two-sided 95% interval.
ONE_SIDED_LEVEL = 0.025


def trained_share_claim(trained: int, runs: int, trained_reference: int, runs_reference: int) -> tuple[str, str]:
    """An arm against its reference by how many of their runs ended ok, where one of them has no
    ok run to take a difference of accuracies from: Fisher's exact test, one-sided in the
    direction the shares point, at the one-sided level ``ONE_SIDED_LEVEL`` (each bound of a
    95% interval): ``better`` when the arm ends ok more often, ``worse`` when less often,
    ``inconclusive`` when p is not below it; with its text. Three ok runs of three against none of
    three give p = 1/20 = 0.05: not enough.

    >>> trained_share_claim(3, 3, 0, 3)
    ('inconclusive', "3 of 3 runs ok against 0 of 3 (Fisher's exact test, one-sided p = 0.050)")
    >>> trained_share_claim(5, 5, 0, 5)[0], trained_share_claim(0, 5, 5, 5)[0]
    ('better', 'worse')
    """
    import scipy.stats

    more = trained * runs_reference >= trained_reference * runs
    p = float(scipy.stats.fisher_exact([[trained, runs - trained], [trained_reference, runs_reference - trained_reference]],
                                       alternative="greater" if more else "less").pvalue)
    verdict = INCONCLUSIVE if p >= ONE_SIDED_LEVEL else BETTER if more else WORSE
    return verdict, f"{trained} of {runs} runs ok against {trained_reference} of {runs_reference} (Fisher's exact test, one-sided p = {p:.3f})"


__all__ = ["BELOW_THE_BEST", "BEST", "BETTER", "CLAIMS", "DEFAULT_CLAIM_MARGIN", "DEFAULT_MARGIN", "INCONCLUSIVE", "MATCHES",
           "MIN_CLAIM_SEEDS", "ONE_SIDED_LEVEL", "TIED_WITH_THE_BEST", "WORSE",
           "claim", "claim_from_interval", "contains_zero", "few_seeds", "standing", "trained_share_claim"]
