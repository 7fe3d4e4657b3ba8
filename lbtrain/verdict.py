"""The verdict on a run: ``ok``, ``diverged``, ``collapsed`` or ``failed``, decided in one place.

- **diverged**: the training loss became non-finite, or a step's loss exceeded ``factor`` times
  the loss at step 0 (measured on the first batch, before any update), checked from the very
  first step. The reference is never an epoch mean: a run that blows up inside its first epoch
  (Goyal et al. 2017, sec. 2.2: large LRs without warmup are unstable early) and settles back
  at chance would otherwise be its own reference and pass.
- **collapsed**: the run finished, but its final train accuracy is within ``margin`` (default
  0.1) of chance (``lbtrain.objectives.chance``: the accuracy of always predicting the most
  frequent training class; R^2 = 0 for regression), or its final train loss is not below the
  step-0 loss: it learned nothing, or next to nothing (a run at 0.18 on ten classes learned
  nothing a reader should average in). Or its history sat at chance (``chance_plateau``): its
  epoch-mean train accuracy lay within ``CHANCE_TOLERANCE`` (0.02) of chance for
  ``CHANCE_PLATEAU_EPOCHS`` (3) epochs in a row that are also at least ``CHANCE_PLATEAU_SPAN``
  (a quarter) of its epochs, or through the last ``CHANCE_PLATEAU_SHARE`` (a third) of its
  epochs (rounded up), whichever its history shows: a run that spent 14 of its 36 epochs
  learning nothing and then took off (a batch of 2,048 on a resnet, 26 updates an epoch)
  measures when it escaped the plateau, a matter of the seed, not what the recipe does in its
  budget, so it is not averaged in either. A short stretch of a long run is a slow start, as
  under warmup: 4 epochs of 43 when a floor of 300 updates makes an epoch 7 updates.
- **ok-unstable**: it finished and learned, but after its first epoch an epoch's mean training
  loss rose above ``instability_factor`` (default 2) times the lowest epoch mean before it, and
  came back at least enough not to diverge (Goyal et al. 2017's early instability, or a spike
  later on): its final numbers are those of a run that restarted from a blow-up, not of the
  recipe working. Epoch means, not steps: a single batch's loss is too noisy to call a spike.
- **failed**: it raised or was killed.
- **ok**: none of these. Only ok runs enter a mean (``lbtrain.reports``), the others are counted
  beside it.

Pure functions of numbers, no TensorFlow: the trainer's ``DivergenceGuard`` applies
``step_divergence`` after every step, the trainer ``judge``s the finished run, and stored
results are re-judged from their recorded losses with the same code.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Sequence

from lbtrain.results import STATUSES, RunResult

# The judging defaults, here and nowhere else (``lbtrain.config``'s ``training.divergence_factor``,
# ``collapse_margin`` and ``instability_factor`` default to them): a step above 10 x the step-0
# loss diverged; a final train accuracy within 0.1 of chance collapsed; an epoch mean above 2 x
# the lowest before it is unstable.
DEFAULT_DIVERGENCE_FACTOR = 10.0
DEFAULT_COLLAPSE_MARGIN = 0.1
DEFAULT_INSTABILITY_FACTOR = 2.0
# A history at chance (``chance_plateau``): epoch-mean train accuracies within 0.02 of the data's
# chance for 3 epochs in a row that are also a quarter of the epochs, or through the last third
# of them, collapsed.
CHANCE_TOLERANCE = 0.02
CHANCE_PLATEAU_EPOCHS = 3
CHANCE_PLATEAU_SHARE = 1 / 3
CHANCE_PLATEAU_SPAN = 1 / 4
OK = "ok"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A run's status and, unless ok, why."""

    status: str
    reason: str | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")


def is_ok(status: str | None) -> bool:
    """Whether a run judged ``status`` enters a mean, a fit or a "best": only ``ok`` does;
    ``ok-unstable``, ``diverged``, ``collapsed`` and ``failed`` runs are counted beside it.

    >>> is_ok("ok"), is_ok("ok-unstable"), is_ok(None)
    (True, False, False)
    """
    return status == OK


def chance_accuracy(labels: Sequence[int]) -> float:
    """The accuracy of always predicting the most frequent label: ``max_c n_c / n``.

    >>> chance_accuracy([0, 1, 2, 2])
    0.5
    """
    counts: dict[int, int] = {}
    for label in labels:
        counts[int(label)] = counts.get(int(label), 0) + 1
    return max(counts.values()) / len(labels) if counts else 0.0


def step_divergence(loss: float, initial_loss: float | None, factor: float = DEFAULT_DIVERGENCE_FACTOR) -> str | None:
    """Why a step's ``loss`` means divergence, or None: non-finite, or above ``factor *
    initial_loss`` (no such check while the step-0 loss is unknown).

    >>> step_divergence(3.0, 2.3) is None
    True
    >>> step_divergence(40.0, 2.3)
    'loss 40 exceeds 10 x the step-0 loss 2.3'
    """
    if not math.isfinite(loss):
        return f"loss became {loss}"
    if initial_loss is not None and loss > factor * initial_loss:
        return f"loss {loss:.4g} exceeds {factor:g} x the step-0 loss {initial_loss:.4g}"
    return None


def first_divergence(losses: Iterable[float], initial_loss: float | None, factor: float = DEFAULT_DIVERGENCE_FACTOR) -> tuple[int, str] | None:
    """``(index, reason)`` of the first loss of a trace that diverged, or None."""
    for index, loss in enumerate(losses):
        reason = step_divergence(float(loss), initial_loss, factor)
        if reason is not None:
            return index, reason
    return None


def collapse(
    final_train_loss: float, final_train_accuracy: float, initial_loss: float | None, chance: float, margin: float = DEFAULT_COLLAPSE_MARGIN
) -> str | None:
    """Why a finished run learned nothing, or None (see the module docstring).

    >>> collapse(2.30, 0.101, 2.31, chance=0.1)
    'final train accuracy 0.101 is within 0.1 of chance (0.1)'
    """
    if final_train_accuracy <= chance + margin:
        where = "within" if final_train_accuracy >= chance else "below, or within"
        return f"final train accuracy {final_train_accuracy:.3g} is {where} {margin:g} of chance ({chance:.3g})"
    if initial_loss is not None and not final_train_loss < initial_loss:
        return f"final train loss {final_train_loss:.4g} is not below the step-0 loss {initial_loss:.4g}"
    return None


def chance_plateau(epoch_accuracies: Sequence[float | None], chance: float | None, tolerance: float = CHANCE_TOLERANCE,
                   epochs: int = CHANCE_PLATEAU_EPOCHS, share: float = CHANCE_PLATEAU_SHARE,
                   span: float = CHANCE_PLATEAU_SPAN) -> str | None:
    """Why a run's epoch-mean train accuracies mean it sat at chance, or None: the longest
    stretch of epochs in a row within ``tolerance`` of ``chance`` (the data's: ``lbtrain.objectives.chance``,
    the majority class's share, as ``collapse`` reads it) lasts ``epochs`` or
    more and at least ``span`` of the run's epochs (rounded up), or covers the last ``share`` of
    the epochs (rounded up) of a run of at least
    ``epochs`` epochs (a run of one or two epochs is judged by its final numbers only: one epoch
    near chance is a slow start, not a collapse). None when ``chance`` is None (regression) or
    no accuracy was recorded; an epoch without one ends a stretch.

    >>> chance_plateau([0.10, 0.11, 0.09, 0.10, 0.45, 0.80], 0.1)
    'train accuracy sat at chance (0.1 ± 0.02) for 4 epochs in a row (epochs 1-4 of 6)'
    >>> chance_plateau([0.60, 0.70, 0.10, 0.10], 0.1)
    'train accuracy sat at chance (0.1 ± 0.02) through the last third of its epochs (epochs 3-4 of 4)'
    >>> chance_plateau([0.10, 0.10, 0.45, 0.80, 0.85, 0.86], 0.1) is None
    True
    >>> chance_plateau([0.25] * 4 + [0.9] * 39, 0.25) is None  # 4 epochs of 43: a slow start
    True
    """
    if chance is None or not epoch_accuracies:
        return None
    at_chance = [value is not None and math.isfinite(value) and abs(value - chance) <= tolerance for value in epoch_accuracies]
    total, longest, first, run = len(at_chance), 0, 0, 0
    for index, flag in enumerate(at_chance):
        run = run + 1 if flag else 0
        if run > longest:
            longest, first = run, index - run + 2  # 1-based
    where = f"chance ({chance:.2g} ± {tolerance:g})"
    if longest >= max(epochs, math.ceil(span * total)):
        return f"train accuracy sat at {where} for {longest} epochs in a row (epochs {first}-{first + longest - 1} of {total})"
    tail = math.ceil(share * total)
    if total >= epochs and all(at_chance[total - tail:]):
        return f"train accuracy sat at {where} through the last {'third' if share == 1 / 3 else f'{share:.0%}'} of its epochs (epochs {total - tail + 1}-{total} of {total})"
    return None


def instability(epoch_losses: Sequence[float], factor: float = DEFAULT_INSTABILITY_FACTOR) -> str | None:
    """Why a run's epoch-mean training losses mean it was unstable, or None: from the second
    epoch on, the first epoch mean above ``factor`` times the lowest one before it.

    >>> instability([1.70, 2.57, 2.12, 12.61, 2.22, 1.35, 0.80])
    'epoch 4 mean loss 12.61 is 7.4 x the lowest epoch mean before it (1.7)'
    >>> instability([1.75, 2.19, 1.36, 0.98, 1.27, 0.57]) is None
    True
    """
    lowest = math.inf
    for epoch, loss in enumerate(epoch_losses, start=1):
        if loss is None or not math.isfinite(loss):
            return None
        if epoch > 1 and loss > factor * lowest:
            return f"epoch {epoch} mean loss {loss:.4g} is {loss / lowest:.2g} x the lowest epoch mean before it ({lowest:.4g})"
        lowest = min(lowest, loss)
    return None


def judge(
    *,
    initial_loss: float | None,
    final_train_loss: float | None,
    final_train_accuracy: float | None,
    chance: float,
    losses: Iterable[float] = (),
    epoch_losses: Sequence[float] = (),
    epoch_accuracies: Sequence[float | None] = (),
    num_classes: int | None = None,
    divergence: str | None = None,
    error: str | None = None,
    factor: float = DEFAULT_DIVERGENCE_FACTOR,
    margin: float = DEFAULT_COLLAPSE_MARGIN,
    instability_factor: float = DEFAULT_INSTABILITY_FACTOR,
) -> Verdict:
    """The verdict on one run, in order of precedence: ``error`` (failed); ``divergence`` (a
    reason the guard already found) or the first diverging loss of ``losses``, or non-finite
    final metrics (diverged); a collapse of its final numbers, or a ``chance_plateau`` of its
    ``epoch_accuracies`` over ``num_classes`` classes (collapsed); an ``instability`` of its
    ``epoch_losses`` (ok-unstable); else ok.

    >>> judge(initial_loss=2.3, final_train_loss=0.4, final_train_accuracy=0.86, chance=0.1, losses=[2.3, 1.1, 0.6])
    Verdict(status='ok', reason=None)
    >>> judge(initial_loss=2.3, final_train_loss=2.3, final_train_accuracy=0.1, chance=0.1, losses=[2.3, 4e23, 2.3]).status
    'diverged'
    """
    if error is not None:
        return Verdict("failed", error)
    if divergence is None:
        found = first_divergence(losses, initial_loss, factor)
        divergence = None if found is None else f"{found[1]} (step {found[0]})"
    if divergence is not None:
        return Verdict("diverged", divergence)
    finals = (final_train_loss, final_train_accuracy)
    if any(value is None or not math.isfinite(value) for value in finals):
        return Verdict("diverged", f"final train loss/accuracy are not finite ({final_train_loss}, {final_train_accuracy})")
    reason = (collapse(final_train_loss, final_train_accuracy, initial_loss, chance, margin)
              or chance_plateau(epoch_accuracies, chance if (num_classes or 0) >= 2 else None))
    if reason:
        return Verdict("collapsed", reason)
    reason = instability(epoch_losses, instability_factor)
    return Verdict("ok-unstable", reason) if reason else Verdict(OK)


def judge_recorded(result: RunResult, chance: float, num_classes: int) -> Verdict:
    """Re-judges a stored run from its record: the epoch-mean training losses of its history
    against its step-0 loss, or, for a run recorded before step-0 losses were kept, against
    ``ln(num_classes)`` (the cross-entropy of a uniform prediction, which a freshly initialised
    classifier starts near); then its final train loss and accuracy. An epoch mean above
    ``factor`` x the reference implies a step above it, so nothing judged diverged here would be
    ok live; the converse does not hold (a short spike can hide in an epoch mean). Its epoch-mean
    train accuracies (the history's ``accuracy``) are judged for a ``chance_plateau`` over
    ``num_classes``. Failed runs stay failed."""
    if result.status == "failed":
        return Verdict("failed", result.reason)
    training = result.config.get("training", {})
    factor = training.get("divergence_factor", DEFAULT_DIVERGENCE_FACTOR)
    initial_loss = result.initial_loss if result.initial_loss is not None else math.log(num_classes)
    divergence = result.reason if result.status == "diverged" else None
    epoch_means = [math.nan if row.get("loss") is None else row["loss"] for row in result.history]
    found = first_divergence(epoch_means, initial_loss, factor) if divergence is None else None
    if found is not None:
        stand_in = "" if result.initial_loss is not None else f"; ln {num_classes} stands for the unrecorded step-0 loss"
        divergence = f"epoch {found[0] + 1} mean {found[1]}{stand_in}"
    return judge(
        initial_loss=initial_loss, final_train_loss=result.metrics.get("train_loss"),
        final_train_accuracy=result.metrics.get("train_accuracy"), chance=chance, divergence=divergence,
        epoch_losses=epoch_means, epoch_accuracies=[row.get("accuracy") for row in result.history] if result.task != "regression" else (),
        num_classes=num_classes, factor=factor, margin=training.get("collapse_margin", DEFAULT_COLLAPSE_MARGIN),
        instability_factor=training.get("instability_factor", DEFAULT_INSTABILITY_FACTOR),
    )


__all__ = ["CHANCE_PLATEAU_EPOCHS", "CHANCE_PLATEAU_SHARE", "CHANCE_PLATEAU_SPAN", "CHANCE_TOLERANCE", "DEFAULT_COLLAPSE_MARGIN", "DEFAULT_DIVERGENCE_FACTOR",
           "DEFAULT_INSTABILITY_FACTOR", "OK", "Verdict", "chance_accuracy", "chance_plateau", "collapse",
           "first_divergence", "instability", "is_ok", "judge", "judge_recorded", "step_divergence"]
