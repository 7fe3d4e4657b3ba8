"""Validation of ``lbtrain advise`` (issue 17, part 3), rendered from committed outputs.

Per model/dataset pair: the advisor's predicted critical batch (the probe's ``B_simple``, with
its 95% bootstrap interval, from ``advice.json``) against the critical batch ``B_crit`` measured
by a steps-to-target study (``report.json`` of ``lbtrain report``: the fit of
``S(B) = S_min (1 + B_crit / B)``, McCandlish et al. 2018), their ratio and whether it is within
2x; and ``B_simple`` tracked over a whole training run at the pair's base batch (the per-epoch
``noise_scale`` of its ``history.csv``: the in-step estimate's moving average at each epoch end)
beside the validation accuracy, with where the run reaches the study's target and where
``B_simple`` reaches the measured ``B_crit``.

The raw probe is biased low (B_simple grows as the loss falls), so the advisor also prints a
calibrated B_crit: B_simple times the geometric mean of the measured / predicted multiples of
these pairs. That calibration is validated out of sample by leaving one pair out: each pair's
B_simple times the geometric mean multiple of the *other* pairs, against its measured B_crit.

``write_validation`` writes ``results/advisor_validation/validation.json``, ``validation.md``
(every number in it comes from the JSON) and ``validation.png`` from the committed outputs: no
training, no TensorFlow.

The fourth edition (issue 56, item 6; ``fourth_edition``, written to
``results/advisor_validation_v4/``): for every fourth-edition study committed (``FOURTH_EDITION``;
one not committed yet reads "not run yet"), the LR exponent ``lbtrain scale``'s design rule and
``lbtrain advise``'s published-evidence recipe predict against the tuned LR's exponent the study
measured with its 95% interval, and B_crit predicted from the gradient noise scale (the advisor's
probe of the workload, committed beside the check, and the study's own B_simple) against B_crit
measured by the critical-batch study of the same workload, the ratio with its interval.

    python scripts/validate_advisor.py
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path
from typing import Any

from lbtrain.reports.scaling_laws import noise_scale_spread
from lbtrain.reports.tables import markdown_table, read_summary, trained_seconds
from lbtrain.results import ADVISOR_VALIDATION_FILE, HISTORY_FILE, METRICS_FILE, SUMMARY_FILE
from lbtrain.rounding import ceil_tolerant

logger = logging.getLogger(__name__)

# Beside ADVISOR_VALIDATION_FILE (lbtrain.results: lab.findings renders the advisor's calibration from it), in OUTPUT.
ADVISOR_VALIDATION_REPORT = "validation.md"
ADVISOR_VALIDATION_FIGURE = "validation.png"

OUTPUT = Path("results") / "advisor_validation"  # relative to the checkout's root
WITHIN = 2.0  # the tolerance: predicted within a factor 2 of measured
DESCRIPTION = ("lbtrain advise: predicted critical batch (probe B_simple) vs measured B_crit of steps-to-target "
               "studies, and B_simple over a whole training run (issue 17, part 3)")

# (label, advice.json, the study's report.json, the tracking run's folder, how the study's runs measured B_simple),
# paths relative to the checkout's root.
PAIRS = (
    ("Fashion-MNIST mlp", "results/advisor_validation/fashion_mnist_mlp/advice.json", "results/critical_batch/report.json",
     "results/advisor_validation/fashion_mnist_mlp/training_run",
     "the earlier GradientNoiseScale callback (fresh batches every 10 steps)"),
    ("MNIST-1D cnn", "results/advisor_validation/mnist1d_cnn/advice.json", "results/advisor_validation_mnist1d/report.json",
     "results/advisor_validation/mnist1d_cnn/training_run", "the in-step estimator, as the probe"),
    # The third edition: the probe was recorded before critical_batch_v3 measured B_crit; the tracking
    # run is the study's own run at the probe's batch (it stops at the target).
    ("Fashion-MNIST resnet", "results/advisor_validation/fashion_mnist_resnet/advice.json", "results/critical_batch_v3/report.json",
     "results/critical_batch_v3/runs/linear-capped-w1-s1-*", "the in-step estimator, as the probe"),
)


def _float(value: Any) -> float | None:
    """A finite float, or None (empty CSV cells, NaN)."""
    if value is None or value == "":
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _read_history(run_dir: Path) -> list[dict[str, Any]]:
    with open(run_dir / HISTORY_FILE, newline="") as handle:
        return list(csv.DictReader(handle))


def _study_wall_seconds(report_path: Path) -> float | None:
    """The summed wall time of the study's runs (its ``summary.csv``; a copied run counted once,
    ``tables.trained_seconds``), when recorded."""
    summary = report_path.parent / SUMMARY_FILE
    if not summary.is_file():
        return None
    return trained_seconds(read_summary(summary)) or None


def _epochs(history: list[dict[str, Any]], steps_per_epoch: int, metric: str, b_crit: float) -> list[dict[str, Any]]:
    """Per epoch of a run's ``history.csv``: its step, ``metric``, ``B_simple`` and its pieces,
    why it is undetermined where it is, and ``B_simple`` as a multiple of ``b_crit``."""
    from lbtrain.measures.noise_scale import simple_noise_scale

    epochs = []
    for row in history:
        epoch = int(row["epoch"])
        scale = _float(row.get("noise_scale"))
        trace, norm_sq = _float(row.get("noise_trace")), _float(row.get("gradient_norm_sq"))
        reason = None
        if scale is None:
            reason = simple_noise_scale(trace, norm_sq)[1] if trace is not None and norm_sq is not None else "not logged"
        epochs.append({"epoch": epoch, "step": epoch * steps_per_epoch, metric: _float(row.get(metric)),
                       "noise_scale": scale, "noise_trace": trace, "gradient_norm_sq": norm_sq,
                       "undetermined": reason, "ratio_to_b_crit": None if scale is None else scale / b_crit})
    return epochs


def tracking(root: Path, run_dir: str, target: float, metric: str, b_crit: float) -> dict[str, Any]:
    """The run's (``run_dir``, relative to ``root``) per-epoch ``B_simple`` and ``metric``; the
    step at which ``metric`` first reaches ``target`` (``lbtrain.measures.steps_to_target``),
    ``B_simple`` at the end of that epoch (the report's convention), and the first epoch end whose
    ``B_simple`` is at least ``b_crit``."""
    from lbtrain.measures.steps_to_target import steps_to_target

    metrics = json.loads((root / run_dir / METRICS_FILE).read_text())
    config = metrics["config"]
    steps_per_epoch = int(metrics["steps_per_epoch"])
    epochs = _epochs(_read_history(root / run_dir), steps_per_epoch, metric, b_crit)
    rows = [{"epoch": e["epoch"], metric: e[metric]} for e in epochs]
    target_step = steps_to_target(rows, steps_per_epoch, target, metric)
    at_target = None
    if target_step is not None:
        epoch = ceil_tolerant(target_step / steps_per_epoch)
        row = next(e for e in epochs if e["epoch"] == epoch)
        at_target = {"epoch": epoch, "step": target_step, "noise_scale": row["noise_scale"],
                     "ratio_to_b_crit": row["ratio_to_b_crit"]}
    reaching = next((e for e in epochs if e["noise_scale"] is not None and e["noise_scale"] >= b_crit), None)
    determined = [e for e in epochs if e["noise_scale"] is not None]
    largest = max(determined, key=lambda e: e["noise_scale"]) if determined else None
    return {
        "run_dir": run_dir,
        "global_batch": metrics["global_batch"],
        "learning_rate": metrics["learning_rate"],
        "rule": config["lr"]["rule"],
        "warmup_epochs": config["lr"]["warmup_epochs"],
        "budget": metrics["budget"],
        "steps_per_epoch": steps_per_epoch,
        "total_steps": metrics["total_steps"],
        "wall_time_seconds": metrics.get("wall_time_seconds"),
        "test_accuracy": metrics["metrics"].get("test_accuracy"),
        "epochs": epochs,
        "first_noise_scale": determined[0]["noise_scale"] if determined else None,
        "largest_noise_scale": None if largest is None else {"epoch": largest["epoch"], "noise_scale": largest["noise_scale"]},
        "undetermined_epochs": [e["epoch"] for e in epochs if e["noise_scale"] is None],
        "target_reached": at_target,
        "reaches_b_crit": None if reaching is None else {"epoch": reaching["epoch"], "step": reaching["step"],
                                                           "noise_scale": reaching["noise_scale"], metric: reaching[metric]},
    }


def pair(root: Path, label: str, advice_path: str, report_path: str, run_dir: str, study_estimator: str) -> dict[str, Any]:
    """One pair's prediction, measurement, their comparison and its tracking run (paths relative
    to ``root``).

    Raises:
      ReportError: the study's report has no critical-batch fit.
    """
    from lbtrain.reports.report import ReportError

    advice = json.loads((root / advice_path).read_text())
    report = json.loads((root / report_path).read_text())
    if "*" in run_dir:  # a run of the study named by pattern: its id ends in its configuration's hash
        found = sorted(root.glob(run_dir))
        if not found:
            raise ReportError(f"{run_dir}: no run matches the tracking run's pattern")
        run_dir = str(found[0].relative_to(root))
    fit = report["critical_batch"]
    if fit.get("b_crit") is None:
        raise ReportError(f"{report_path}: no critical-batch fit ({fit.get('note')})")
    estimate = advice["noise_scale"]
    predicted, measured = estimate["mean"], fit["b_crit"]
    ratio = predicted / measured
    low, high = estimate["low"], estimate["high"]
    interval_within = None
    if low is not None and high is not None:
        inside = [measured / WITHIN <= value <= measured * WITHIN for value in (low, high)]
        interval_within = "entirely" if all(inside) else "partly" if any(inside) or (low < measured / WITHIN and high > measured * WITHIN) else "no"
    probe = advice["probe"]
    track = tracking(root, run_dir, report["target"], report["metric"], measured)
    at_target = track["target_reached"]
    study_noise = report.get("noise_scale") or {}
    return {
        "pair": label,
        "model": probe["model"],
        "dataset": probe["dataset"],
        "advice": advice_path,
        "study": report_path,
        "predicted": {
            "b_simple": predicted, "low": low, "high": high, "level": estimate["level"], "probe_steps_averaged": estimate["n"],
            "probe_steps": probe["steps"], "probe_global_batch": probe["global_batch"],
            "probe_seconds": sum(step["seconds"] for step in advice["steps"]),
            "recommended_world_size": advice.get("recommended_world_size"),
        },
        "measured": {
            "b_crit": measured, "s_min": fit["s_min"], "e_min": fit["e_min"], "relative_rms": fit["relative_rms"],
            "batches": fit["batches"], "target": report["target"], "metric": report["metric"], "residuals": fit["residuals"],
            "b_simple_at_target_in_study": study_noise.get("median"), "study_runs_with_b_simple_at_target": study_noise.get("runs"),
            "study_batches_with_b_simple_at_target": study_noise.get("batches"), "study_b_simple_range": study_noise.get("range"),
            "study_b_simple_estimator": study_estimator,
            "study_wall_seconds": _study_wall_seconds(root / report_path),
        },
        "ratio": ratio,
        "factor_off": max(ratio, 1 / ratio),
        "within_2x": 1 / WITHIN <= ratio <= WITHIN,
        "interval_within_2x": interval_within,
        "tracking": track,
        "growth_probe_to_target": None if at_target is None or at_target["noise_scale"] is None else at_target["noise_scale"] / predicted,
    }


# Rendering -------------------------------------------------------------------------------


def _n(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _verdict(item: dict[str, Any]) -> str:
    """The pair's sentence: within 2x or not, and, when not, the measured reason."""
    p, m, t = item["predicted"], item["measured"], item["tracking"]
    head = (f"**{item['pair']}**: the advisor's probe ({p['probe_steps']} steps at batch {p['probe_global_batch']}) predicts "
            f"B_simple = {_n(p['b_simple'])} (95% CI {_n(p['low'])} to {_n(p['high'])}); the steps-to-target study measures "
            f"B_crit = {_n(m['b_crit'])} (to {m['metric']} {m['target']:.3f}, {m['batches']} batch sizes, relative rms error "
            f"{100 * m['relative_rms']:.1f}%). Ratio predicted / measured = {item['ratio']:.2f}: ")
    if item["within_2x"]:
        head += f"**within 2x** (the interval {item['interval_within_2x']} within it)."
    else:
        direction = "below" if item["ratio"] < 1 else "above"
        head += f"**not within 2x**: the prediction is {item['factor_off']:.1f}x {direction} the measured critical batch."
    at_target, reaching = t["target_reached"], t["reaches_b_crit"]
    parts = []
    if at_target is not None and at_target["noise_scale"] is not None:
        parts.append(f"Over a whole run at batch {t['global_batch']}, B_simple is {_n(at_target['noise_scale'])} at the end of "
                     f"epoch {at_target['epoch']}, where {m['metric']} first reaches {m['target']:.3f} (step "
                     f"{_n(at_target['step'])}): {item['growth_probe_to_target']:.1f}x the probe's value and "
                     f"{at_target['ratio_to_b_crit']:.2f}x the measured B_crit")
    elif at_target is None:
        parts.append(f"The tracking run at batch {t['global_batch']} never reaches {m['metric']} {m['target']:.3f}")
    if reaching is not None:
        parts.append(f"B_simple first reaches B_crit at the end of epoch {reaching['epoch']} of {len(t['epochs'])} "
                     f"(step {reaching['step']}, B_simple {_n(reaching['noise_scale'])}, {m['metric']} {reaching[m['metric']]:.4f})")
    else:
        largest = t["largest_noise_scale"]
        parts.append("B_simple never reaches B_crit in the run" +
                     ("" if largest is None else f" (largest {_n(largest['noise_scale'])}, epoch {largest['epoch']})"))
    if m["b_simple_at_target_in_study"] is not None:
        if m.get("study_batches_with_b_simple_at_target"):  # a report taken batch by batch (report.noise_scale_summary)
            spread = m["study_b_simple_range"]
            parts.append(f"the study's own runs logged B_simple {_n(m['b_simple_at_target_in_study'])} at the epoch each reached "
                         f"the target (the median over {m['study_batches_with_b_simple_at_target']} batch sizes of each batch's "
                         f"median, {m['study_runs_with_b_simple_at_target']} runs"
                         + ("" if not spread else f"; from {_n(spread[0])} to {_n(spread[1])} over the batch sizes")
                         + f"; {m['study_b_simple_estimator']})")
        else:
            parts.append(f"the study's own runs logged a median B_simple of {_n(m['b_simple_at_target_in_study'])} at the epoch "
                         f"each reached the target ({m['study_runs_with_b_simple_at_target']} runs; {m['study_b_simple_estimator']})")
    text = head + " " + "; ".join(parts) + "."
    if not item["within_2x"] and item["growth_probe_to_target"] is not None:
        growth, remaining = item["growth_probe_to_target"], at_target["ratio_to_b_crit"]
        text += f" Measured reason: B_simple grows {growth:.1f}x from the probe to the point where the target is reached"
        if item["ratio"] < 1 and remaining < 1:
            text += (f", and there it is still {1 / remaining:.1f}x below B_crit ({growth:.1f} x {1 / remaining:.1f} = "
                     f"{item['factor_off']:.1f}x, the miss).")
        else:
            text += f", where it is {remaining:.2f}x B_crit."
    return text


def leave_one_out(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair: the calibrated prediction from the other pairs only, B_simple x the geometric
    mean of their measured / predicted multiples, its ratio to the measured B_crit and whether
    it is within 2x. Empty with fewer than two pairs."""
    multiples = [item["measured"]["b_crit"] / item["predicted"]["b_simple"] for item in pairs]
    rows = []
    for index, item in enumerate(pairs):
        others = [multiple for other, multiple in enumerate(multiples) if other != index]
        if not others:
            continue
        multiple = math.exp(sum(math.log(m) for m in others) / len(others))
        calibrated = item["predicted"]["b_simple"] * multiple
        ratio = calibrated / item["measured"]["b_crit"]
        rows.append({"pair": item["pair"], "calibrated_from": [pairs[other]["pair"] for other in range(len(pairs)) if other != index],
                     "multiple": multiple, "calibrated_b_crit": calibrated, "measured_b_crit": item["measured"]["b_crit"],
                     "ratio": ratio, "within_2x": 1 / WITHIN <= ratio <= WITHIN})
    return rows


def per_batch(item: dict[str, Any], calibrated: float | None) -> list[dict[str, Any]]:
    """The advisor's critical batch checked at every batch of the pair's study: the measured
    fewest steps to the target there (the fit's points) against the steps a critical batch
    ``B_c`` predicts, anchored at the smallest batch's measured steps,
    ``S(B) = S(B_0) (1 + B_c / B) / (1 + B_c / B_0)`` (McCandlish et al. 2018's
    ``S = S_min (1 + B_crit / B)``, whose ``S_min`` the advisor does not predict), for ``B_c`` the
    probe's raw B_simple (``raw``) and the calibrated B_crit from the other pairs
    (``calibrated``, None with no other pair): each with its ratio to the measured steps and
    whether it is within 2x."""
    points = sorted(item["measured"]["residuals"], key=lambda point: point["global_batch"])
    if not points:
        return []
    base = points[0]
    rows = []
    for point in points:
        row: dict[str, Any] = {"global_batch": point["global_batch"], "measured_steps": point["steps"]}
        for name, b_c in (("raw", item["predicted"]["b_simple"]), ("calibrated", calibrated)):
            if b_c is None:
                row[name] = None
                continue
            steps = base["steps"] * (1 + b_c / point["global_batch"]) / (1 + b_c / base["global_batch"])
            ratio = steps / point["steps"]
            row[name] = {"b_crit": b_c, "steps": steps, "ratio": ratio, "within_2x": 1 / WITHIN <= ratio <= WITHIN}
        rows.append(row)
    return rows


def _per_batch_section(data: dict[str, Any]) -> list[str]:
    lines = ["## Checked at every batch size", "",
             "The steps to the target each pair's study measured at every batch (the fit's points: the fewest mean steps "
             "among the recipes whose every seed reached it) against the steps the advisor's critical batch predicts, "
             "S(B_0) (1 + B_c / B) / (1 + B_c / B_0), anchored at the smallest batch B_0's measured steps (the advisor "
             "predicts where the steps stop falling, not how many they are): B_c the probe's raw B_simple, and the calibrated "
             "B_crit from the other pairs only (leave one out). A ratio below 1 predicts fewer steps than measured: "
             "scaling promised past where it holds.", ""]
    for item in data["pairs"]:
        rows = item.get("per_batch") or []
        if not rows:
            continue

        def cell(prediction: dict[str, Any] | None) -> str:
            return "-" if prediction is None else f"{_n(prediction['steps'])} ({prediction['ratio']:.2f})"

        beyond = rows[1:]  # the smallest batch is the anchor: its ratio is 1 by construction
        raw_within = sum(row["raw"]["within_2x"] for row in beyond)
        calibrated = [row["calibrated"] for row in beyond if row["calibrated"] is not None]
        lines += [f"**{item['pair']}** (raw B_c = {_n(item['predicted']['b_simple'])}"
                  + (f", calibrated B_c = {_n(rows[0]['calibrated']['b_crit'])}" if rows[0]["calibrated"] else "")
                  + f"; measured B_crit = {_n(item['measured']['b_crit'])}):", "",
                  markdown_table(["global batch", "measured steps", "predicted from raw B_simple (ratio)",
                                  "predicted from calibrated B_crit (ratio)"],
                                 [[row["global_batch"], _n(row["measured_steps"]), cell(row["raw"]), cell(row["calibrated"])]
                                  for row in rows]), "",
                  f"Within 2x of the measured steps beyond the anchor batch {rows[0]['global_batch']}: raw at {raw_within} of "
                  f"{len(beyond)} batch sizes"
                  + (f", calibrated at {sum(row['within_2x'] for row in calibrated)} of {len(calibrated)}" if calibrated else "")
                  + ".", ""]
    return lines


def _leave_one_out_section(data: dict[str, Any]) -> list[str]:
    rows = data["leave_one_out"]
    if not rows:
        return []
    return ["## Calibrated prediction, validated by leaving one pair out", "",
            "`lbtrain advise` also prints a calibrated B_crit: the probe's B_simple times the geometric mean of the "
            "measured / predicted multiples of these pairs. Fitted on all pairs it cannot be validated on them; here each "
            "pair is predicted from the other pairs' multiples only.", "",
            markdown_table(["pair", "calibrated from", "multiple", "calibrated B_crit", "measured B_crit", "calibrated / measured",
                            "within 2x"],
                           [[row["pair"], ", ".join(row["calibrated_from"]), f"{row['multiple']:.1f}x", _n(row["calibrated_b_crit"]),
                             _n(row["measured_b_crit"]), f"{row['ratio']:.2f}", "yes" if row["within_2x"] else "no"] for row in rows]),
            "",
            f"Left-out pairs within 2x: {sum(row['within_2x'] for row in rows)} of {len(rows)}. With {len(rows)} pairs this is "
            "thin evidence: the multiple is a property of the model, data and target, and a new pair may sit outside the "
            "range these span.", ""]


def _pairs_table(pairs: list[dict[str, Any]]) -> str:
    return markdown_table(
        ["pair", "probe", "predicted B_simple [95% CI]", "measured B_crit", "fit rms error", "batches fitted", "target",
         "predicted / measured", "within 2x"],
        [[item["pair"], f"{item['predicted']['probe_steps']} steps at batch {item['predicted']['probe_global_batch']}",
          f"{_n(item['predicted']['b_simple'])} [{_n(item['predicted']['low'])}, {_n(item['predicted']['high'])}]",
          _n(item["measured"]["b_crit"]), f"{100 * item['measured']['relative_rms']:.1f}%", item["measured"]["batches"],
          f"{item['measured']['metric']} {item['measured']['target']:.3f}", f"{item['ratio']:.2f}",
          "yes" if item["within_2x"] else "no"] for item in pairs])


def _tracking_lines(item: dict[str, Any]) -> list[str]:
    """One pair's tracking run: its heading, its per-epoch table and how far B_simple grew."""
    t, m = item["tracking"], item["measured"]
    lines = [f"### {item['pair']}: batch {t['global_batch']}, lr {t['learning_rate']:g} ({t['rule']} rule, "
             f"warmup {t['warmup_epochs']:g} epoch{'' if t['warmup_epochs'] == 1 else 's'}, cosine decay), {t['total_steps']} steps, test accuracy {t['test_accuracy']:.4f}",
             "", f"Measured B_crit {_n(m['b_crit'])}; target {m['metric']} {m['target']:.3f}.", "",
             markdown_table(["epoch", "step", m["metric"], "B_simple", "B_simple / B_crit"],
                            [[e["epoch"], e["step"], "-" if e[m["metric"]] is None else f"{e[m['metric']]:.4f}",
                              f"undetermined ({e['undetermined']})" if e["noise_scale"] is None else _n(e["noise_scale"]),
                              "-" if e["ratio_to_b_crit"] is None else f"{e['ratio_to_b_crit']:.2f}"]
                             for e in t["epochs"]]), ""]
    first, largest = t["first_noise_scale"], t["largest_noise_scale"]
    if first is not None and largest is not None:
        lines += [f"B_simple grows from {_n(first)} at the end of epoch 1 to at most {_n(largest['noise_scale'])} "
                  f"(epoch {largest['epoch']}), {largest['noise_scale'] / first:.0f}x"
                  + (f"; undetermined at epoch{'s' if len(t['undetermined_epochs']) > 1 else ''} "
                     f"{', '.join(map(str, t['undetermined_epochs']))}." if t["undetermined_epochs"] else "."), ""]
    return lines


def render_markdown(data: dict[str, Any]) -> str:
    """``validation.md``: every number in it from ``data`` (``validation``)."""
    pairs = data["pairs"]
    lines = [
        "# Validation of `lbtrain advise`",
        "",
        "Rendered by `python scripts/validate_advisor.py` from `validation.json` (every number here is in it). "
        "The advisor predicts the critical batch B_crit ~ B_noise ~ B_simple (McCandlish et al. 2018) from a short probe at "
        "the experiment's base batch: B_simple = tr(Sigma) / |G|^2 measured inside every train step, the ratio of the mean "
        "estimates over the probe's second half with a 95% bootstrap interval over its steps. The measured B_crit is the fit "
        "of S(B) = S_min (1 + B_crit / B) to the fewest steps to the target at each global batch of a steps-to-target study "
        "(`lbtrain report`; the steps are counted on the validation metric the table names, never on test). Within 2x means 0.5 <= predicted / measured <= 2.",
        "",
        _pairs_table(pairs),
        "",
        f"Within 2x on {sum(item['within_2x'] for item in pairs)} of {len(pairs)} pairs.",
        "",
    ]
    lines += [] if not data.get("waiting") else [
        "Not validated yet, their study not committed: " + "; ".join(f"{item['pair']} ({item['study']})" for item in data["waiting"])
        + ". Their probes are committed: each prediction was recorded before its measurement.", ""]
    lines += [_verdict(item) + "\n" for item in pairs]
    lines += _leave_one_out_section(data)
    lines += _per_batch_section(data)
    lines += ["![predicted vs measured critical batch; B_simple over training](validation.png)", "",
              "## B_simple over a whole training run", "",
              "The per-epoch `noise_scale` of one run at each pair's base batch (the in-step estimate's moving average at the "
              "epoch's end), its validation accuracy, and B_simple as a multiple of the measured B_crit. *undetermined* (with the "
              "reason): no B_simple is logged, e.g. the averaged |G|^2 estimate is not positive, the true gradient being small "
              "against its noise late in training.", ""]
    for item in pairs:
        lines += _tracking_lines(item)
    lines += ["## Compute", "",
              markdown_table(["pair", "advisor probe steps (s, summed step times)", "tracking run wall (s)", "study runs wall (s, summed)"],
                             [[item["pair"], _n(item["predicted"]["probe_seconds"], 1), _n(item["tracking"]["wall_time_seconds"], 1),
                               _n(item["measured"]["study_wall_seconds"], 0)] for item in pairs]), ""]
    return "\n".join(lines)


def _interval(label: str, x: float, low: float | None, high: float | None) -> list:
    """A 95% interval as a vertical segment in ``label``'s colour (``Line``'s own band would be
    labelled a bootstrap over seeds; this one is over the probe's steps)."""
    from lbtrain.reports.plots import Line

    return [] if low is None or high is None else [Line(label, [x, x], [low, high])]


PROBE_LABEL = "advisor probe, 95% CI (1 epoch)"


def _prediction_panel(pairs: list[dict[str, Any]]) -> list[Any]:
    """Predicted B_simple (with its 95% interval) against the measured B_crit per pair, with the
    identity and the 2x lines."""
    from lbtrain.reports.plots import Line

    values = [v for item in pairs for v in (item["measured"]["b_crit"], item["predicted"]["b_simple"], item["predicted"]["low"],
                                            item["predicted"]["high"]) if v is not None]
    span = [min(values) / WITHIN, max(values) * WITHIN]
    panel = []
    for item in pairs:
        x = round(item["measured"]["b_crit"])  # the tick label; the JSON keeps the fitted value
        panel += [Line(item["pair"], [x], [item["predicted"]["b_simple"]]),
                  *_interval(item["pair"], x, item["predicted"]["low"], item["predicted"]["high"])]
    return panel + [Line("predicted = measured", span, span, reference=True),
                    Line(f"{WITHIN:g}x off", span, [v * WITHIN for v in span], reference=True),
                    Line(f"{WITHIN:g}x off", span, [v / WITHIN for v in span], reference=True)]


def _tracking_panel(item: dict[str, Any]) -> list[Any]:
    """A pair's B_simple over the training epochs (the line broken at undetermined epochs), the
    measured B_crit as a horizontal reference and the probe's value at epoch 1."""
    from lbtrain.reports.plots import Line

    xs = [e["epoch"] for e in item["tracking"]["epochs"]]
    segments: list[list[dict[str, Any]]] = [[]]  # broken where B_simple is undetermined
    for e in item["tracking"]["epochs"]:
        if e["noise_scale"] is None:
            segments.append([])
        else:
            segments[-1].append(e)
    return [
        *(Line(item["pair"], [e["epoch"] for e in segment], [e["noise_scale"] for e in segment]) for segment in segments if segment),
        Line(PROBE_LABEL, [1], [item["predicted"]["b_simple"]]),
        *_interval(PROBE_LABEL, 1, item["predicted"]["low"], item["predicted"]["high"]),
        Line("measured B_crit", [min(xs), max(xs)], [item["measured"]["b_crit"]] * 2, reference=True),
    ]


def plot(data: dict[str, Any], path: Path) -> Path:
    """``validation.png``: the prediction against the measurement (``_prediction_panel``), then per
    pair B_simple over its tracking run (``_tracking_panel``). Drawn by
    ``lbtrain.reports.plots.draw_panels`` (what ``plot_panels`` saves) on a log2 batch axis; the
    epoch panels are then put on a linear axis."""
    from matplotlib.ticker import MaxNLocator

    from lbtrain.files import write_atomic
    from lbtrain.reports.plots import draw_panels

    panels = {"advisor's B_simple (95% CI) vs measured B_crit": _prediction_panel(data["pairs"])}
    for item in data["pairs"]:
        panels[f"B_simple over training: {item['pair']} (batch {item['tracking']['global_batch']})"] = _tracking_panel(item)
    figure = draw_panels(panels, xlabel="epoch", ylabel="B_simple", log2_x=True, log_y=True, share_y=False)
    axes = [a for a in figure.axes if a.get_visible()][:len(panels)]
    axes[0].set_xlabel("measured B_crit (steps-to-target fit)")
    axes[0].set_ylabel("predicted B_simple (advisor probe)")
    for panel in axes[1:]:
        panel.set_xscale("linear")
        panel.xaxis.set_major_locator(MaxNLocator(integer=True))
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    return write_atomic(path, image.getvalue())


# The validation ------------------------------------------------------------------------------


def validation(root: Path, pairs: tuple[tuple[str, str, str, str, str], ...] = PAIRS) -> dict[str, Any]:
    """The record ``validation.json`` holds: every pair whose study is committed (``pair``), the
    pairs still ``waiting`` for theirs, how many are within 2x, and the calibration validated by
    leaving one pair out; ``pairs`` as ``PAIRS``, relative to ``root``."""
    ready = [spec for spec in pairs if (root / spec[2]).is_file()]
    data = {"description": DESCRIPTION, "tolerance": WITHIN, "pairs": [pair(root, *spec) for spec in ready],
            "waiting": [{"pair": spec[0], "study": spec[2]} for spec in pairs if spec not in ready]}
    data["within_2x"] = sum(item["within_2x"] for item in data["pairs"])
    data["leave_one_out"] = leave_one_out(data["pairs"])
    calibrated = {row["pair"]: row["calibrated_b_crit"] for row in data["leave_one_out"]}
    for item in data["pairs"]:
        item["per_batch"] = per_batch(item, calibrated.get(item["pair"]))
    return data


def write_validation(root: Path) -> dict[str, Any]:
    """Writes ``validation.json``, ``validation.md`` and ``validation.png`` into ``root``'s
    ``results/advisor_validation`` from the committed outputs of ``PAIRS``, and the fourth
    edition's check into ``results/advisor_validation_v4`` (``write_fourth_edition``); returns the
    first record."""
    from lbtrain.files import write_atomic

    data = validation(root)
    output = root / OUTPUT
    output.mkdir(parents=True, exist_ok=True)
    write_atomic(output / ADVISOR_VALIDATION_FILE, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())
    write_atomic(output / ADVISOR_VALIDATION_REPORT, render_markdown(data).encode())
    plot(data, output / ADVISOR_VALIDATION_FIGURE)
    write_fourth_edition(root)
    logger.info("wrote %s, %s, %s", output / ADVISOR_VALIDATION_FILE, ADVISOR_VALIDATION_REPORT, ADVISOR_VALIDATION_FIGURE)
    return data


def summary_lines(data: dict[str, Any]) -> list[str]:
    """One line per pair (predicted, measured, ratio, within 2x) and per left-out pair."""
    lines = [f"{item['pair']}: predicted {item['predicted']['b_simple']:.0f} [{item['predicted']['low']:.0f}, "
             f"{item['predicted']['high']:.0f}], measured {item['measured']['b_crit']:.0f}, ratio {item['ratio']:.2f}, "
             f"within 2x: {'yes' if item['within_2x'] else 'no'}" for item in data["pairs"]]
    lines += [f"{row['pair']}, calibrated from {', '.join(row['calibrated_from'])}: {row['calibrated_b_crit']:.0f} vs "
              f"{row['measured_b_crit']:.0f}, ratio {row['ratio']:.2f}, within 2x: {'yes' if row['within_2x'] else 'no'}"
              for row in data["leave_one_out"]]
    return lines


# The fourth edition (issue 56, item 6) ----------------------------------------------------------

OUTPUT_V4 = Path("results") / "advisor_validation_v4"
DESCRIPTION_V4 = ("lbtrain advise and lbtrain scale's predictions against the fourth-edition studies: the LR exponent "
                  "predicted vs measured, and B_crit predicted (gradient noise scale) vs measured, each with its interval "
                  "(issue 56, item 6)")
# (study, its folder, the folder of the critical-batch study measured on the same workload, the advisor's probe of that
# workload), relative to the checkout's root. goyal_v4 and critical_batch_v4 share a workload (MLP 256-256, full
# Fashion-MNIST, momentum SGD with half an epoch of warmup and cosine decay), adam_vit_v4 and critical_batch_vit_v4
# another (a small ViT on full Fashion-MNIST, Adam with a quarter epoch of warmup and cosine decay); keskar_v4 has no
# critical-batch study. Each probe is `lbtrain advise experiments/<study>.yaml --output <its folder>` (one epoch at
# the base batch; scripts/run_studies_v4.sh).
FOURTH_EDITION = (
    ("goyal_v4", "results/goyal_v4", "results/critical_batch_v4", "results/advisor_validation_v4/goyal_v4/advice.json"),
    ("critical_batch_v4", "results/critical_batch_v4", "results/critical_batch_v4", "results/advisor_validation_v4/goyal_v4/advice.json"),
    ("keskar_v4", "results/keskar_v4", None, None),
    ("adam_vit_v4", "results/adam_vit_v4", "results/critical_batch_vit_v4", "results/advisor_validation_v4/adam_vit_v4/advice.json"),
    ("critical_batch_vit_v4", "results/critical_batch_vit_v4", "results/critical_batch_vit_v4",
     "results/advisor_validation_v4/adam_vit_v4/advice.json"),
)
# The LR exponent of each rule in the global batch (lbtrain.scaling: lr = base_lr (B / base_batch) ** alpha).
RULE_EXPONENTS = {"linear": 1.0, "sqrt": 0.5, "none": 0.0}
MATCHES, DOES_NOT_MATCH, INCONCLUSIVE = "matches", "does not match", "inconclusive"
# The name of a steps-to-target study's own B_simple among the predictions of B_crit.
OWN_B_SIMPLE = "the study's B_simple at the target"


def rule_exponent(rule: Any) -> float | None:
    """The exponent of an ``lr.rule`` (a rule's name or a number), None for anything else."""
    if isinstance(rule, (int, float)) and not isinstance(rule, bool):
        return float(rule)
    return RULE_EXPONENTS.get(str(rule))


def recipe_exponent(label: str) -> float | None:
    """The exponent of the rule a recipe's label names (``sqrt+warmup``: 0.5), None when it names
    none (a tuned LR) or more than one."""
    import re

    named = {word for word in RULE_EXPONENTS if re.search(rf"(?<![\w-]){word}(?![\w-])", label)}
    return RULE_EXPONENTS[named.pop()] if len(named) == 1 else None


def _json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _experiment(folder: Path) -> dict[str, Any]:
    import yaml

    from lbtrain.results import EXPERIMENT_FILE

    path = folder / EXPERIMENT_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def exponent_decision(predicted: float | None, low: float | None, high: float | None) -> str | None:
    """``matches`` when the measured exponent's 95% interval holds the prediction, ``does not
    match`` when it excludes it (margin 0: the interval itself); None without both."""
    if predicted is None or low is None or high is None:
        return None
    return MATCHES if low <= predicted <= high else DOES_NOT_MATCH


def ratio_decision(interval: tuple[float, float] | None) -> str | None:
    """Predicted / measured B_crit judged as the results page judges McCandlish et al.: ``matches``
    when the whole ratio interval lies within [1/2, 2], ``does not match`` when wholly outside,
    ``inconclusive`` otherwise."""
    if interval is None:
        return None
    low, high = interval
    if 1 / WITHIN <= low and high <= WITHIN:
        return MATCHES
    return DOES_NOT_MATCH if high < 1 / WITHIN or low > WITHIN else INCONCLUSIVE


def _measured_exponent(folder: Path, answer: dict[str, Any] | None, optimizer: str) -> dict[str, Any] | None:
    """The tuned LR's exponent the study measured: ``lbtrain scale``'s (``answer.json``, the arm of
    the experiment's own optimizer) or a sweep's (``sweep_fit.json``); None when it measured none."""
    from lbtrain.results import SWEEP_FIT_FILE

    fits = (answer or {}).get("lr_exponent") or {}
    arm = next((name for name in fits if name.split("+")[0] == optimizer), None)
    if arm is not None:
        return {"arm": arm, "source": "answer.json", **fits[arm]}
    fit = _json(folder / SWEEP_FIT_FILE)
    return None if fit is None else {"arm": None, "source": SWEEP_FIT_FILE, **fit}


def _advisor_recipe(model: str, dataset: str, multiple: float) -> dict[str, Any] | None:
    """What the advisor quotes from lbtrain's published findings at ``multiple`` x the base batch
    (its fallback without the user's own evidence), with the exponent of its rule."""
    from lbtrain.studies.findings import recipe_advice

    row = recipe_advice(model, dataset, multiple)
    if row is None or not row["held"]:
        return None
    first = row["held"][0]["recipe"]
    return {"recipe": first, "study": row["title"], "multiple": row["multiple"], "asked_multiple": multiple,
            "exponent": recipe_exponent(first)}


def _predicted_b_crit(answer: dict[str, Any] | None, report: dict[str, Any] | None,
                      advice: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The predictions of B_crit on the workload, each with its spread: the advisor's probe
    (B_simple with its 95% bootstrap interval over the probe's steps) and its calibrated B_crit,
    ``lbtrain scale``'s B_simple (the median of the ok runs' final values, its range over training),
    a steps-to-target study's B_simple at the target (median over batch sizes, its range)."""
    predictions = []
    if advice is not None and advice["noise_scale"]["mean"] is not None:
        estimate = advice["noise_scale"]
        predictions.append({"by": "lbtrain advise: probe B_simple", "value": estimate["mean"], "low": estimate["low"],
                            "high": estimate["high"], "spread": f"95% bootstrap interval over the last {estimate['n']} of the probe's "
                            f"{advice['probe']['steps']} steps at batch {advice['probe']['global_batch']}"})
        calibrated = advice["probe"].get("calibrated")
        if calibrated:
            multiple = calibrated["multiple"]
            predictions.append({"by": "lbtrain advise: calibrated B_crit", "value": calibrated["b_crit"],
                                "low": estimate["low"] * multiple, "high": estimate["high"] * multiple,
                                "spread": f"the probe's interval x {multiple:.2f}, the geometric mean multiple of "
                                f"{len(calibrated['pairs'])} validation pairs, whose own scatter is not included"})
    noise = (answer or {}).get("noise_scale")
    if noise and noise.get("b_simple") is not None:
        predictions.append({"by": "lbtrain scale: B_simple", "value": noise["b_simple"], "low": noise.get("low"),
                            "high": noise.get("high"), "spread": f"the median of {noise.get('runs')} ok runs' final values; "
                            "its range over training, a spread of measurements with no confidence level"})
    noise = (report or {}).get("noise_scale")
    if noise and noise.get("median") is not None:
        # As the report's B_simple / B_crit (CriticalBatchFit.noise_scale_ratio_interval): the hull of its range over the
        # batch sizes and over the second half of each run's way to the target.
        low, high = noise_scale_spread(noise.get("range"), noise.get("training_range")) or (None, None)
        over = "over them" + (" and over the second half of each run's way to the target" if noise.get("training_range") else "")
        predictions.append({"by": OWN_B_SIMPLE, "value": noise["median"], "low": low, "high": high,
                            "spread": f"the median over {noise.get('batches')} batch sizes; its range {over}, as the study's "
                                      "report sets it against B_crit"})
    return predictions


def _measured_b_crit(root: Path, folder: str | None) -> dict[str, Any]:
    """B_crit measured on the workload by its critical-batch study (``report.json``), or why not."""
    from lbtrain.results import REPORT_JSON

    if folder is None:
        return {"status": "no critical-batch study on this workload"}
    report = _json(root / folder / REPORT_JSON)
    if report is None:
        return {"status": "not run yet", "study": folder}
    fit = report.get("critical_batch") or {}
    if fit.get("b_crit") is None:
        return {"status": f"not fitted: {fit.get('note')}", "study": folder}
    interval = fit.get("b_crit_interval")
    return {"status": "measured", "study": folder, "b_crit": fit["b_crit"], "low": None if interval is None else interval[0],
            "high": None if interval is None or interval[1] is None else interval[1], "batches": fit["batches"],
            "seeds": fit.get("seeds"), "estimate_method": fit.get("estimate_method"), "interval_method": fit.get("interval_method"),
            "target": report.get("target"), "metric": report.get("metric")}


def _ratio(prediction: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any] | None:
    """Predicted / measured with the hull ``[predicted low / measured high, predicted high / measured
    low]`` (no confidence level: a prediction's spread over the measurement's interval)."""
    if measured.get("status") != "measured":
        return None
    ratio = prediction["value"] / measured["b_crit"]
    interval = None
    if None not in (prediction["low"], prediction["high"], measured["low"]):
        high = math.inf if measured["high"] is None else measured["high"]
        interval = (prediction["low"] / high, prediction["high"] / measured["low"] if measured["low"] > 0 else math.inf)
    return {"ratio": ratio, "low": None if interval is None else interval[0],
            "high": None if interval is None or not math.isfinite(interval[1]) else interval[1],
            "decision": ratio_decision(interval)}


def _linear_break(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where ``lbtrain scale`` found the linear rule stop: the largest global batch where it
    matches and the first where it is worse (a bracket of global batches), when the answer has them."""
    if not answer or answer.get("first_worse") is None:
        return None
    batches = {row["world_size"]: row["global_batch"] for row in answer["per_world_size"]}
    holds = answer.get("linear_rule_holds_up_to")
    return {"holds_up_to": batches.get(holds), "first_worse": batches.get(answer["first_worse"])}


def fourth_edition_study(root: Path, name: str, folder: str, b_crit_study: str | None, advice_path: str | None) -> dict[str, Any]:
    """One fourth-edition study's check (paths relative to ``root``): ``not run yet`` without its
    result (``answer.json`` of ``lbtrain scale`` or ``report.json`` of ``lbtrain report``)."""
    from lbtrain.results import ANSWER_FILE, REPORT_JSON

    path = root / folder
    answer, report = _json(path / ANSWER_FILE), _json(path / REPORT_JSON)
    if answer is None and report is None:
        return {"study": name, "folder": folder, "status": "not run yet"}
    experiment = _experiment(path)
    model = (answer or {}).get("model") or (experiment.get("model") or {}).get("name")
    dataset = (answer or {}).get("data") or (experiment.get("data") or {}).get("dataset")
    optimizer = (experiment.get("optimizer") or {}).get("name")
    advice = None if advice_path is None else _json(root / advice_path)
    lr = experiment.get("lr") or {}
    measured = _measured_exponent(path, answer, optimizer)
    exponent = None
    if measured is not None:
        batches = [row["global_batch"] for row in measured["batches"]]
        base = lr.get("base_batch") or min(batches)
        if advice is not None and advice.get("recommended_world_size"):
            asked = advice["recommended_world_size"] * advice["probe"]["per_worker_batch_advised"] / base
        else:
            asked = max(batches) / base
        low, high = measured.get("alpha_95_low"), measured.get("alpha_95_high")
        scale_rule = rule_exponent(lr.get("rule"))
        advisor = None if model is None or dataset is None else _advisor_recipe(model, dataset, asked)
        exponent = {"measured": {key: measured.get(key) for key in ("arm", "source", "alpha", "points", "note")} | {"low": low, "high": high},
                    "batches": batches,
                    "scale": {"rule": lr.get("rule"), "exponent": scale_rule, "decision": exponent_decision(scale_rule, low, high)},
                    "advisor": None if advisor is None else {**advisor,
                                                             "decision": exponent_decision(advisor["exponent"], low, high)},
                    "rules_inside": [rule for rule, value in RULE_EXPONENTS.items()
                                     if low is not None and high is not None and low <= value <= high]}
    measured_b_crit = _measured_b_crit(root, b_crit_study)
    predictions = _predicted_b_crit(answer, report, advice)
    for prediction in predictions:
        prediction["ratio"] = _ratio(prediction, measured_b_crit)
    return {"study": name, "folder": folder, "status": "done", "model": model, "dataset": dataset, "optimizer": optimizer,
            "exponent": exponent, "b_crit": {"measured": measured_b_crit, "predicted": predictions,
                                             "linear_break": _linear_break(answer)}}


def fourth_edition(root: Path, studies: tuple[tuple[str, str, str | None, str | None], ...] = FOURTH_EDITION) -> dict[str, Any]:
    """The record ``results/advisor_validation_v4/validation.json`` holds (``fourth_edition_study``
    per study of ``studies``, relative to ``root``)."""
    return {"description": DESCRIPTION_V4, "tolerance": WITHIN, "studies": [fourth_edition_study(root, *spec) for spec in studies]}


def _value(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _exponent_lines(item: dict[str, Any]) -> list[str]:
    exponent = item["exponent"]
    if exponent is None:
        return ["- LR exponent: not measured by this study (no tuned LR per batch with an interval)."]
    measured = exponent["measured"]
    where = f"{measured['source']}" + (f", arm {measured['arm']}" if measured["arm"] else "")
    if measured["alpha"] is None:
        return [f"- LR exponent: not fitted ({measured['note']}; {where})."]
    interval = ("no interval" if measured["low"] is None else f"[{measured['low']:.2f}, {measured['high']:.2f}]")
    lines = [f"- LR exponent measured: {measured['alpha']:.2f} {interval} over {measured['points']} batch sizes "
             f"{exponent['batches'][0]:,} to {exponent['batches'][-1]:,} ({where}; tuned LR ~ B^alpha, bootstrap over trials)."]
    scale = exponent["scale"]
    if scale["exponent"] is not None:
        lines.append(f"  - lbtrain scale's design rule (`lr.rule: {scale['rule']}`, which centres every batch's LR grid) "
                     f"predicts {scale['exponent']:.2f}: **{scale['decision'] or 'no decision (no interval)'}**.")
    advisor = exponent["advisor"]
    if advisor is not None:
        said = ("names no rule (a tuned LR)" if advisor["exponent"] is None else f"predicts {advisor['exponent']:.2f}: "
                f"**{advisor['decision'] or 'no decision (no interval)'}**")
        lines.append(f"  - lbtrain advise without the study (lbtrain's findings, at {advisor['asked_multiple']:g}x the base "
                     f"batch; the nearest row {advisor['multiple']:g}x of \"{advisor['study']}\"): `{advisor['recipe']}`, which {said}.")
    inside = exponent["rules_inside"]
    lines.append("  - Rules inside the measured interval: " + (", ".join(inside) if inside else "none of linear, sqrt, none")
                 + (" (the interval cannot tell them apart)." if len(inside) > 1 else "."))
    return lines


def _b_crit_lines(item: dict[str, Any]) -> list[str]:
    b_crit = item["b_crit"]
    measured = b_crit["measured"]
    if measured["status"] == "measured":
        high = "unbounded" if measured["high"] is None else f"{measured['high']:,.0f}"
        head = (f"- B_crit measured by {measured['study']}: {measured['b_crit']:,.0f} [{_value(measured['low'], 0)}, {high}] "
                f"({measured['estimate_method']} estimate, {measured['interval_method']} interval; {measured['batches']} batch "
                f"sizes, {measured['seeds']} seeds or more each; {measured['metric']} {measured['target']:.3f}).")
    elif measured["status"] == "not run yet":
        head = f"- B_crit measured: not run yet ({measured['study']} is the critical-batch study of this workload)."
    else:
        head = f"- B_crit measured: {measured['status']}."
    lines = [head]
    for prediction in b_crit["predicted"]:
        spread = "" if prediction["low"] is None else f" [{_value(prediction['low'], 0)}, {_value(prediction['high'], 0)}]"
        line = f"  - {prediction['by']}: {prediction['value']:,.0f}{spread} ({prediction['spread']})"
        ratio = prediction["ratio"]
        if ratio is not None:
            interval = "" if ratio["low"] is None else f" [{_value(ratio['low'])}, {_value(ratio['high']) if ratio['high'] is not None else 'unbounded'}]"
            line += (f"; predicted / measured = {ratio['ratio']:.2f}{interval}: **{ratio['decision'] or 'no decision (no interval)'}**"
                     f" (tolerance: within {WITHIN:g}x)")
        lines.append(line + ".")
    if not b_crit["predicted"]:
        lines.append("  - No prediction of B_crit recorded on this workload (no advisor probe, no B_simple in the study).")
    brk = b_crit["linear_break"]
    if brk is not None:
        held = ("it matches at no batch beyond the reference's" if brk["holds_up_to"] is None else
                f"it matches up to batch {_value(brk['holds_up_to'], 0)}")
        worse = ("is worse at none" if brk["first_worse"] is None else f"is worse from batch {_value(brk['first_worse'], 0)}")
        lines.append(f"  - Where the linear rule stopped in this study: {held} and {worse}. Not a B_crit measurement, so no ratio: McCandlish et al.'s "
                     "model puts the end of linear LR growth near B_noise, but the break also moves with the warmup and with where "
                     "the LR becomes unstable, and B_crit is defined by steps to a target, which this study does not count.")
    return lines


def render_fourth_edition(data: dict[str, Any]) -> str:
    """``results/advisor_validation_v4/validation.md``: every number from ``data`` (``fourth_edition``)."""
    lines = ["# The advisor and `lbtrain scale` against the fourth-edition studies", "",
             "Rendered by `python scripts/validate_advisor.py` from `validation.json` (every number here is in it). Per study: "
             "(i) the LR exponent predicted (the rule `lbtrain scale` centres its grids on, and the recipe `lbtrain advise` quotes "
             "from lbtrain's published findings without the study) against the tuned LR's exponent the study measured, with its "
             "95% interval: *matches* when the interval holds the prediction, *does not match* when it excludes it; (ii) B_crit "
             "predicted from the gradient noise scale against B_crit measured by the critical-batch study of the same workload, "
             f"the ratio over the prediction's spread and the measurement's interval (a hull, no confidence level): *matches* "
             f"when it lies wholly within [{1 / WITHIN:g}, {WITHIN:g}], *does not match* when wholly outside, *inconclusive* "
             "otherwise.", ""]
    for item in data["studies"]:
        lines.append(f"## {item['study']}")
        lines.append("")
        if item["status"] == "not run yet":
            lines += [f"Not run yet (no answer.json or report.json in {item['folder']}).", ""]
            continue
        lines += [f"{item['model']} on {item['dataset']}, {item['optimizer']}.", ""]
        lines += _exponent_lines(item) + _b_crit_lines(item) + [""]
    return "\n".join(lines)


def write_fourth_edition(root: Path) -> dict[str, Any]:
    """Writes ``validation.json`` and ``validation.md`` into ``root``'s ``results/advisor_validation_v4``."""
    from lbtrain.files import write_atomic

    data = fourth_edition(root)
    output = root / OUTPUT_V4
    output.mkdir(parents=True, exist_ok=True)
    write_atomic(output / ADVISOR_VALIDATION_FILE, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())
    write_atomic(output / ADVISOR_VALIDATION_REPORT, render_fourth_edition(data).encode())
    return data
