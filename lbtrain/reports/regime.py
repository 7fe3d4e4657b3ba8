"""Regime: whether a study ran where the paper it tests made its claim.

A claim about large-batch training holds in a regime: the global batch as a fraction of the
training set, and the number of updates the large batch gets. A study far outside it does not
test the claim, whatever it finds: goyal_bn at 64 workers trains a batch of 1024 on 8,000 images
(12.8% of the data per update) for 42 updates, where Goyal et al. 2017 at 8k use 0.64% of
ImageNet for about 14,000 updates. Its loss at 64 workers is step starvation, not a failure of
the linear rule. Such a study reads ``out of regime``, never a claim on the paper.

The rule, at a study's largest batch (its regime is that of its most demanding runs):

- *in regime* when the batch is at most ``MAX_BATCH_FRACTION`` = 5% of the training set **and**
  the large batch gets at least ``MIN_UPDATES`` = 300 updates;
- else *out of regime*.

Why these thresholds. 5% is twice the largest fraction at which the large-batch ImageNet papers
report their claims (You et al. 2017 and Nado et al. 2021 at batch 32,768: 2.6% of 1.28M images),
rounded up. Above it an epoch is fewer than 20 updates, so a warmup or decay counted in epochs
(Goyal et al.'s 5 warmup epochs) runs over a handful of steps. 300 updates is about a tenth of
the fewest the SGD papers give their largest batch (You et al. at 32k for 90 epochs: about 3,500),
leaving room for small models and data that converge in fewer steps. Below it a warmup and a
decay share a few dozen steps, and the run is starved of steps, not tested at its batch.

Per paper: a paper that itself works beyond a threshold widens it to its own regime. The
largest fraction allowed is ``max(MAX_BATCH_FRACTION, the paper's largest fraction)`` (Keskar
et al. 2017's large batch is 10% of the data; Hoffer et al. 2017's 4096 is 8.2% of CIFAR-10).
The fewest updates allowed is ``min(MIN_UPDATES, the paper's fewest)`` (Keskar et al.'s
large batch: 200 in the authors' code). A paper whose claim is about the whole range of batches
drops a bound (``bounds_fraction`` / ``bounds_updates`` False, with the reason): Shallue et al.
2018 and McCandlish et al. 2018 measure the steps to a target as the batch grows until
the steps stop falling, so large fractions and few steps are their regime. Hoffer et al. 2017's
claim is that too few updates make the gap, so its large batch at few updates is part of it.

A study's regime is read from its committed files (``study_regimes``): each run's
``metrics.json`` (its global batch, steps per epoch and budget) and ``experiment.yaml`` (its
mode). The *update batch* is the global batch of a synchronous mode. For an asynchronous one
(``lbtrain.worlds.modes``: not ``sweepable``, since its update is not the synchronous one), it is one
worker's batch, which each update applies. The training-set size ``N`` is the smallest consistent with every
run: an epoch is ``N // B`` updates at update batch ``B``, so ``spe * B <= N < (spe + 1) * B``.
It is exact when the smallest batch divides ``N``, else below ``N`` by less than one batch.
The updates at a batch are the fewest any run at that batch was budgeted (``epochs * steps
per epoch``, ``steps``, or ``samples // B``; a run that stopped early, diverged or reached its
target, is counted at its budget).

Pure: reads files, loads no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

from lbtrain.reports.tables import experiment_record
from lbtrain.results import METRICS_FILE, RUNS_FOLDER
from lbtrain.worlds.modes import get_mode

MAX_BATCH_FRACTION = 0.05
MIN_UPDATES = 300
OUT_OF_REGIME = "out of regime"

IMAGENET_TRAIN = 1_281_167  # ILSVRC-2012 training images (Russakovsky et al. 2015)
CIFAR10_TRAIN = 50_000


def _percent(fraction: float) -> str:
    """``0.128`` as ``12.8%``, small fractions with two significant digits (``0.02%``)."""
    return f"{100 * fraction:.2g}%" if fraction < 0.001 else f"{100 * fraction:.3g}%"


def _span(low: float, high: float, text: Callable[[float], str] = lambda value: f"{value:,}") -> str:
    return text(low) if low == high else f"{text(low)}–{text(high)}"


@dataclasses.dataclass(frozen=True)
class Regime:
    """A study at one update batch: ``global_batch`` samples an update, ``train_size`` training
    samples, ``updates`` budgeted updates (``epochs`` epochs)."""

    global_batch: int
    train_size: int
    updates: int
    epochs: float

    @property
    def fraction(self) -> float:
        """The batch as a fraction of the training set, ``global_batch / train_size``."""
        return self.global_batch / self.train_size

    def describe(self) -> str:
        """``batch 1,024 = 12.8% of 8,000; 42 updates (6 epochs)``."""
        epochs = f"{self.epochs:.0f}" if abs(self.epochs - round(self.epochs)) < 0.05 else f"{self.epochs:.1f}"
        return (f"batch {self.global_batch:,} = {_percent(self.fraction)} of {self.train_size:,}; "
                f"{self.updates:,} updates ({epochs} epochs)")


@dataclasses.dataclass(frozen=True)
class PaperRegime:
    """Where a paper made its claim, as it reports it; ``source`` says where each number comes
    from. Ranges are (smallest, largest). ``largest_fraction`` and ``fewest_updates`` are given
    when the paper states them, else derived: ``batch[1] / train_size`` and ``epochs[0] *
    train_size / batch[1]`` (the largest batch for the fewest epochs). ``bounds_fraction`` /
    ``bounds_updates`` False drop that bound for the reason ``unbounded_because``."""

    paper: str
    data: str
    source: str
    train_size: int | None = None
    batch: tuple[int, int] | None = None
    epochs: tuple[float, float] | None = None
    largest_fraction: float | None = None
    fewest_updates: int | None = None
    bounds_fraction: bool = True
    bounds_updates: bool = True
    unbounded_because: str = ""

    def fraction_range(self) -> tuple[float | None, float] | None:
        """The batch as a fraction of the data, smallest and largest (the smallest None when
        only the largest is known)."""
        if self.train_size and self.batch:
            return self.batch[0] / self.train_size, self.batch[1] / self.train_size
        return None if self.largest_fraction is None else (None, self.largest_fraction)

    def updates_range(self) -> tuple[int, int | None] | None:
        """Updates at the largest batch for the fewest epochs, and at the smallest for the most."""
        if self.fewest_updates is not None:
            return self.fewest_updates, None
        if self.train_size and self.batch and self.epochs:
            return (round(self.epochs[0] * self.train_size / self.batch[1]),
                    round(self.epochs[1] * self.train_size / self.batch[0]))
        return None

    def max_fraction(self) -> float | None:
        """The largest batch fraction in regime: ``max(MAX_BATCH_FRACTION, the paper's)``; None
        when the paper's claim bounds none."""
        if not self.bounds_fraction:
            return None
        ranges = self.fraction_range()
        return max(MAX_BATCH_FRACTION, ranges[1]) if ranges else MAX_BATCH_FRACTION

    def min_updates(self) -> int | None:
        """The fewest updates in regime: ``min(MIN_UPDATES, the paper's fewest)``; None when the
        paper's claim bounds none."""
        if not self.bounds_updates:
            return None
        ranges = self.updates_range()
        return min(MIN_UPDATES, ranges[0]) if ranges else MIN_UPDATES

    def describe(self) -> str:
        """The data, batches (as fractions of the data), epochs and updates the paper reports."""
        parts = [self.data] + ([f"{self.train_size:,} training samples"] if self.train_size else [])
        fractions = self.fraction_range()
        if self.batch:
            parts.append(f"batch {_span(*self.batch)}" + (f" ({_span(*fractions, text=_percent)} of the data)" if self.train_size else ""))
        elif fractions:
            parts.append(f"large batch {_percent(fractions[1])} of the data")
        if self.epochs:
            parts.append(f"{_span(*self.epochs, text=lambda value: f'{value:g}')} epochs")
        updates = self.updates_range()
        if updates:
            parts.append(f"{updates[0]:,} updates at the largest batch" if updates[1] is None else f"{_span(*updates)} updates")
        return "; ".join(parts)


# The papers' regimes. Numbers are the papers' own unless said otherwise.
PAPER_REGIMES: dict[str, PaperRegime] = {regime.paper: regime for regime in (
    PaperRegime("Goyal et al. 2017", "ImageNet-1k, ResNet-50",
                "Goyal et al. 2017, 'Accurate, Large Minibatch SGD' (arXiv 1706.02677): batch 256 to 8k at equal error, "
                "90 epochs, 5 warmup epochs; error rises beyond 8k (their Figure 1)",
                train_size=IMAGENET_TRAIN, batch=(256, 8192), epochs=(90, 90)),
    PaperRegime("You et al. 2017", "ImageNet-1k, AlexNet(-BN) and ResNet-50",
                "You, Gitman and Ginsburg 2017, 'Large Batch Training of Convolutional Networks' (LARS, arXiv 1708.03888): "
                "batch up to 32k; ResNet-50 90 epochs, AlexNet 100",
                train_size=IMAGENET_TRAIN, batch=(256, 32768), epochs=(90, 100)),
    PaperRegime("You et al. 2020", "BERT-Large pre-training on Wikipedia and BooksCorpus (also ImageNet-1k, ResNet-50)",
                "You et al. 2020, 'Large Batch Optimization for Deep Learning: Training BERT in 76 minutes' (LAMB, ICLR, "
                "arXiv 1904.00962): batch 512 (1M updates) to 32,768 (15,625 updates), and 65,536 then 32,768 in 8,599 updates, "
                "at no loss of SQuAD F1 against the baseline; the data set's size in sequences is not restated here",
                batch=(512, 65536), fewest_updates=8599),
    PaperRegime("Keskar et al. 2017", "MNIST, TIMIT, CIFAR-10 and CIFAR-100 (fully connected and conv nets, Adam)",
                "Keskar et al. 2017, 'On Large-Batch Training for Deep Learning' (ICLR): small batch 256, large batch 10% of "
                "the training data; 20 epochs for both in the authors' code (github.com/keskarnitish/large-batch-training, "
                "plot_parametric_plot.py: batch 5000 of CIFAR's 50,000), so 200 updates at the large batch",
                epochs=(20, 20), largest_fraction=0.10, fewest_updates=200),
    PaperRegime("Shallue et al. 2018", "35 workloads on 7 data sets (MNIST to Common Crawl)",
                "Shallue et al. 2018, 'Measuring the Effects of Data Parallelism' (JMLR 2019): steps to a goal "
                "out-of-sample error, batches in powers of two, each with its own tuned metaparameters",
                bounds_fraction=False, bounds_updates=False,
                unbounded_because="the claim is the shape of steps-to-target against the batch, measured until the steps "
                                  "stop falling"),
    PaperRegime("McCandlish et al. 2018", "MNIST, SVHN, CIFAR-10, ImageNet, Billion Word, Atari, Dota",
                "McCandlish et al. 2018, 'An Empirical Model of Large-Batch Training' (arXiv 1812.06162): critical batches "
                "from tens to millions, steps and samples to a target per batch",
                bounds_fraction=False, bounds_updates=False,
                unbounded_because="the claim is where steps-to-target stops falling with the batch, measured past it"),
    PaperRegime("Hoffer et al. 2017", "CIFAR-10 (also MNIST, CIFAR-100, ImageNet)",
                "Hoffer, Hubara and Soudry 2017, 'Train longer, generalize better' (NeurIPS): small batch 128, large 4096 "
                "(their Table 1); CIFAR-10's 50,000 is the smallest set at 4096",
                train_size=CIFAR10_TRAIN, batch=(128, 4096), bounds_updates=False,
                unbounded_because="the claim is that too few updates make the gap: its large batch at few updates is "
                                  "part of it"),
    PaperRegime("Nado et al. 2021", "ImageNet-1k, ResNet-50 (also BERT pre-training at batch 65,536)",
                "Nado et al. 2021, 'A Large Batch Optimizer Reality Check' (arXiv 2102.06356): ResNet-50 at batch 32,768",
                train_size=IMAGENET_TRAIN, batch=(32768, 32768)),
    PaperRegime("Malladi et al. 2022", "CIFAR-10, ResNet-50 (also language models)",
                "Malladi et al. 2022, 'On the SDEs and Scaling Rules for Adaptive Gradient Algorithms' (NeurIPS): "
                "base batch 256 on CIFAR-10, scaled up by the square-root rule; the largest batch is not restated here",
                train_size=CIFAR10_TRAIN),
    PaperRegime("Lian et al. 2015; Dutta et al. 2018", "asynchronous SGD with bounded staleness",
                "Lian et al. 2015 (NeurIPS) and Dutta et al. 2018 (AISTATS): per-worker mini-batches; batch sizes and "
                "budgets are not restated here"),
    PaperRegime("Zhang et al. 2016", "asynchronous SGD, CIFAR-10 and ImageNet",
                "Zhang, Gupta, Lian and Liu 2016, 'Staleness-aware Async-SGD' (IJCAI): per-learner mini-batches; batch "
                "sizes and budgets are not restated here"),
    PaperRegime("Mitliagkas et al. 2016", "asynchronous SGD on deep conv nets",
                "Mitliagkas et al. 2016, 'Asynchrony begets Momentum' (Allerton): per-worker mini-batches; batch sizes and "
                "budgets are not restated here"),
)}


def _planned_updates(run: dict[str, Any], batch: int) -> int | None:
    """The updates the run was budgeted: ``epochs * steps_per_epoch``, ``steps`` or
    ``samples // batch``, raised to the budget's update floor ``min_steps`` where it is below
    (``lbtrain.config.RunConfig.total_steps``: goyal_v4's batch 2,048 trains 800 updates, not
    its 6 epochs' 156); None for a run that never started (no steps per epoch)."""
    budget, per_epoch = run.get("budget") or {}, run.get("steps_per_epoch") or 0
    if budget.get("epochs") is not None and per_epoch:
        planned = int(budget["epochs"]) * per_epoch
    elif budget.get("steps") is not None:
        planned = int(budget["steps"])
    elif budget.get("samples") is not None:
        planned = int(budget["samples"]) // batch
    else:
        return None
    return max(planned, int(budget.get("min_steps") or 0))


def _asynchronous(folder: Path) -> bool:
    """Whether the study's mode does not train one synchronous update (``experiment.yaml``)."""
    mode = experiment_record(folder).get("mode")
    return mode is not None and not get_mode(mode).sweepable


def study_regimes(results: Path, study: str) -> list[Regime]:
    """The study's regime at each of its update batches, smallest first (the module doc says
    how each number is read); empty when the study has no finished run."""
    folder = results / study
    asynchronous = _asynchronous(folder)
    runs = []
    for path in sorted((folder / RUNS_FOLDER).glob(f"*/{METRICS_FILE}")):
        run = json.loads(path.read_text())
        if not run.get("steps_per_epoch"):
            continue
        batch = run["global_batch"] // run["world_size"] if asynchronous else run["global_batch"]
        runs.append((batch, run["steps_per_epoch"], _planned_updates(run, batch)))
    if not runs:
        return []
    train_size = max(per_epoch * batch for batch, per_epoch, _ in runs)
    regimes = []
    for batch in sorted({batch for batch, _, _ in runs}):
        at_batch = [(updates, per_epoch) for b, per_epoch, updates in runs if b == batch and updates is not None]
        if at_batch:
            updates, per_epoch = min(at_batch)
            regimes.append(Regime(batch, train_size, updates, updates / per_epoch))
    return regimes


def study_regime(results: Path, study: str) -> Regime | None:
    """The study's regime at its largest update batch; None when it has no finished run."""
    regimes = study_regimes(results, study)
    return regimes[-1] if regimes else None


def in_regime(paper: PaperRegime, study: Regime) -> tuple[bool, str]:
    """Whether ``study`` lies in ``paper``'s regime (the module doc's rule), and why, in words:
    ``(False, '12.8% of the data > 5%; 42 updates < 300')``."""
    failures, passes = [], []
    limit = paper.max_fraction()
    if limit is not None:
        (passes if study.fraction <= limit else failures).append(
            f"{_percent(study.fraction)} of the data {'<=' if study.fraction <= limit else '>'} {_percent(limit)}")
    fewest = paper.min_updates()
    if fewest is not None:
        (passes if study.updates >= fewest else failures).append(
            f"{study.updates:,} updates {'>=' if study.updates >= fewest else '<'} {fewest:,}")
    if failures:
        return False, "; ".join(failures)
    return True, "; ".join(passes) if passes else f"no bound: {paper.unbounded_because}"


def largest_in_regime(paper: PaperRegime, regimes: list[Regime]) -> Regime | None:
    """The largest of ``regimes`` (``study_regimes``) in ``paper``'s regime, or None."""
    inside = [regime for regime in regimes if in_regime(paper, regime)[0]]
    return inside[-1] if inside else None


__all__ = ["CIFAR10_TRAIN", "IMAGENET_TRAIN", "MAX_BATCH_FRACTION", "MIN_UPDATES", "OUT_OF_REGIME", "PAPER_REGIMES",
           "PaperRegime", "Regime", "in_regime", "largest_in_regime", "study_regime", "study_regimes"]
