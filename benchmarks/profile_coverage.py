"""Coverage of B_crit's profile-likelihood interval (``lbtrain.reports.scaling_laws.profile_interval``)
in critical_batch_v4's design (experiments/critical_batch_v4.yaml): 7 global batches 32 to 2,048,
4 LR candidates a batch (1/4, 1/2, 1 and 2 x the linear rule), 4 seeds each, the candidate with the
fewest mean steps kept per batch and the interval computed on its seeds.

The simulated truth: S(B) = 200 (1 + 300 / B) steps at the best LR; the best LR lies a uniform
offset in [-1.5, 0.5] octaves from the linear rule (the grid's best is interior, as the design's
grid extension ensures); a candidate d octaves from the best takes (1 + kappa d^2) x S(B) steps in
expectation (kappa = 0: the 4 candidates tie, the strongest selection; larger kappa: a narrower LR
basin); each seed is scattered by a coefficient of variation of 10%. Printed per kappa: the share of
studies whose 95% interval holds the true 300, with its Wilson 95% interval, and the median estimate.

    python benchmarks/profile_coverage.py [--studies 1000] [--seed 56]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from lbtrain.reports.scaling_laws import profile_interval

BATCHES = (32, 64, 128, 256, 512, 1024, 2048)
CANDIDATE_OCTAVES = (-2, -1, 0, 1)  # 1/4, 1/2, 1, 2 x the linear rule
S_MIN, B_CRIT, CV, SEEDS = 200.0, 300.0, 0.1, 4


def study(rng: np.random.Generator, kappa: float) -> list[np.ndarray]:
    """Each batch's chosen candidate's seeds (module doc)."""
    chosen = []
    for batch in BATCHES:
        best = rng.uniform(-1.5, 0.5)
        candidates = [S_MIN * (1 + B_CRIT / batch) * (1 + kappa * (octave - best) ** 2) * (1 + CV * rng.standard_normal(SEEDS))
                      for octave in CANDIDATE_OCTAVES]
        chosen.append(min(candidates, key=np.mean))
    return chosen


def wilson(successes: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's score interval for a proportion."""
    share = successes / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=56)
    arguments = parser.parse_args()
    print(f"critical_batch_v4's design: {len(BATCHES)} batches {BATCHES[0]}-{BATCHES[-1]}, {len(CANDIDATE_OCTAVES)} LR candidates, "
          f"{SEEDS} seeds, cv {CV:.0%}; true B_crit {B_CRIT:.0f}; {arguments.studies} simulated studies per kappa")
    for kappa in (0.0, 0.1, 0.3, 1.0):
        rng = np.random.default_rng(arguments.seed)
        found = [profile_interval(BATCHES, study(rng, kappa)) for _ in range(arguments.studies)]
        covered = sum(item.interval[0] <= B_CRIT <= item.interval[1] for item in found)
        low, high = wilson(covered, arguments.studies)
        print(f"kappa {kappa:.1f}: coverage {covered / arguments.studies:.3f} [{low:.3f}, {high:.3f}] (n={arguments.studies}), "
              f"median estimate {np.median([item.b_crit for item in found]):.0f}")


if __name__ == "__main__":
    main()
