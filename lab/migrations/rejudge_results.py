"""Re-judges committed results under today's verdict rules (``lbtrain.verdict``).

For every study folder given (default: every folder of ``results/`` with an ``experiment.yaml``),
each committed run is judged again by ``lbtrain.verdict.judge_recorded``. By default only the
verdicts that moved are written: the ``status`` and ``reason`` of those runs in their
``metrics.json`` and in ``summary.csv``, every other byte as committed (so a run keeps the
record it was made with; issue 56's chance-plateau rule moved critical_batch_v3's batch 2048 and
4096 runs that sat at chance for 14 and 19 epochs to ``collapsed`` this way). The reports, pages
and figures that read those verdicts are rendered again by their own commands afterwards.

With ``--rewrite-records`` (the one-off migration of results recorded before lbtrain had one
verdict per run), it also rewrites every record in today's layout:

- the recorded configs say what the runs did: ``lr.offset_decay`` (the old name) becomes
  ``lr.decay_clock`` (``after_warmup`` for ``true``, today's default ``from_step_0`` for
  ``false``), and an ``experiment.yaml`` that relied on the old default gets
  ``lr.decay_clock: after_warmup`` written out;
- each run is judged again by ``lbtrain.verdict.judge_recorded`` (its epoch losses against
  its step-0 loss or ln(classes), its final train loss and accuracy against chance) under
  today's rules, and rewritten, and ``summary.csv`` is rebuilt with the current columns. A run
  recorded with the collapse margin that was the default before issue 35 (``OLD_COLLAPSE_MARGIN``,
  0.05) is judged with today's default (``lbtrain.verdict.DEFAULT_COLLAPSE_MARGIN``, 0.1), and one
  recorded before the instability rule with its default factor: neither was the user's choice,
  and run ids hash the judging fields at fixed values (``lbtrain.config.JUDGING_FIELDS``), so
  the runs keep their ids;
- a sweep's trials get the user attribute ``status``: a trial pruned for its loss is
  ``diverged``; a complete trial whose validation accuracy is within the collapse margin of
  chance is ``collapsed`` (no train accuracy was stored for trials); the others ``ok``; then
  the sweep's summary, fit and figures are written again.

Prints one line per run or trial whose status moved. Run from the repository root:
``.venv/bin/python -m lab.migrations.rejudge_results [--rewrite-records] [results/NAME ...]``.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import optuna
import sqlalchemy
import yaml

from lbtrain.config import load_experiment, run_config_from_dict
from lbtrain.data import load_dataset
from lbtrain.files import csv_text, write_atomic, write_json_atomic
from lbtrain.reports.tuning import read_only_storage, results_storage
from lbtrain.results import EXPERIMENT_FILE, METRICS_FILE, PROTOCOL_FILE, RUNS_FOLDER, SUMMARY_FILE, RunResult, write_run
from lbtrain.storage_urls import JOURNAL, sqlalchemy_url
from lbtrain.studies.plan import PlannedRun
from lbtrain.studies.runner import summary_csv, summary_row
from lbtrain.verdict import DEFAULT_COLLAPSE_MARGIN, DEFAULT_INSTABILITY_FACTOR, chance_accuracy, judge_recorded

OLD_CLOCK = {True: "after_warmup", False: "from_step_0"}
OLD_COLLAPSE_MARGIN = 0.05


def today_judging(training: dict) -> dict:
    """A run's ``training`` section with the judging fields recorded at their old defaults set to
    today's (module doc)."""
    training = dict(training)
    if training.get("collapse_margin", OLD_COLLAPSE_MARGIN) == OLD_COLLAPSE_MARGIN:
        training["collapse_margin"] = DEFAULT_COLLAPSE_MARGIN
    training.setdefault("instability_factor", DEFAULT_INSTABILITY_FACTOR)
    return training


def migrate_lr(lr: dict) -> dict:
    """An ``lr`` section with ``offset_decay`` (or its old default, true) as ``decay_clock``."""
    lr = dict(lr)
    if "decay_clock" not in lr:
        lr["decay_clock"] = OLD_CLOCK[bool(lr.pop("offset_decay", True))]
    return lr


def migrate_experiment(folder: Path) -> None:
    """Renames ``offset_decay`` in ``experiment.yaml``; a record without it (written after the
    rename, under today's default clock) is left as it is."""
    path = folder / EXPERIMENT_FILE
    data = yaml.safe_load(path.read_text())
    if "offset_decay" in data.get("lr", {}):
        data["lr"] = migrate_lr(data["lr"])
        write_atomic(path, yaml.safe_dump(data, sort_keys=False))


def dataset_facts(config, cache: dict) -> tuple[float, int]:
    """(chance accuracy, number of classes) of a run's training split."""
    key = json.dumps(config.data.model_dump(mode="json"), sort_keys=True) + str(config.training.seed)
    if key not in cache:
        data = load_dataset(config.data.dataset, train_subset=config.data.train_subset,
                            validation_split=config.data.validation_split, seed=config.training.seed, **config.data.options)
        cache[key] = (chance_accuracy(data.y_train), data.num_classes)
    return cache[key]


def verdict_rows(summary: str, moved: dict[str, tuple[str, str | None]]) -> str:
    """``summary`` (a ``summary.csv``'s text) with the ``status`` and ``reason`` of the runs in
    ``moved`` (run id -> (status, reason)) replaced, every other cell and column as it was.

    >>> print(verdict_rows("run_id,status,reason\\na,ok,\\nb,ok,\\n", {"b": ("collapsed", "at chance, 3 epochs")}), end="")
    run_id,status,reason
    a,ok,
    b,collapsed,"at chance, 3 epochs"
    """
    reader = csv.DictReader(io.StringIO(summary))
    rows = [dict(row, **dict(zip(("status", "reason"), moved[row["run_id"]]))) if row["run_id"] in moved else row for row in reader]
    return csv_text(rows, columns=reader.fieldnames)


def rejudge_verdicts(folder: Path) -> dict[str, tuple[str, str | None]]:
    """Judges every committed run of ``folder`` again and writes only the verdicts that moved
    (module doc); returns run id -> (status, reason) of those."""
    summary = folder / SUMMARY_FILE
    if not summary.is_file() or not (folder / RUNS_FOLDER).is_dir():
        return {}
    cache: dict = {}
    moved: dict[str, tuple[str, str | None]] = {}
    with open(summary, newline="") as handle:
        run_ids = [row["run_id"] for row in csv.DictReader(handle)]
    for run_id in run_ids:
        path = folder / RUNS_FOLDER / run_id / METRICS_FILE
        data = json.loads(path.read_text())
        result = RunResult.from_dict(data)
        config = run_config_from_dict(data["config"])
        chance, classes = dataset_facts(config, cache)
        verdict = judge_recorded(result, chance, classes)
        if (verdict.status, verdict.reason) == (result.status, result.reason):
            continue
        print(f"{folder.name}/{run_id}: {result.status} -> {verdict.status} ({verdict.reason})")
        moved[run_id] = (verdict.status, verdict.reason)
        write_json_atomic(path, {**data, "status": verdict.status, "reason": verdict.reason})
    if moved:
        write_atomic(summary, verdict_rows(summary.read_text(), moved))
    return moved


def rejudge_runs(folder: Path) -> None:
    """The ``--rewrite-records`` migration of one folder's runs (module doc)."""
    labels = {}
    summary = folder / SUMMARY_FILE
    if summary.is_file():
        with open(summary, newline="") as handle:
            labels = {row["run_id"]: row["label"] for row in csv.DictReader(handle)}
    if labels and not (folder / RUNS_FOLDER).is_dir():
        print(f"{folder.name}: its runs are not committed (only {SUMMARY_FILE}): left as recorded")
        return
    cache: dict = {}
    rows = []
    for run_id, label in labels.items():
        run_dir = folder / RUNS_FOLDER / run_id
        data = json.loads((run_dir / METRICS_FILE).read_text())
        data["config"]["lr"] = migrate_lr(data["config"]["lr"])
        data["config"]["training"] = today_judging(data["config"]["training"])
        config = run_config_from_dict(data["config"])
        data["config"] = config.to_dict()
        result = RunResult.from_dict(data)
        if not result.budget:
            result.budget = config.training.budget
        chance, classes = dataset_facts(config, cache)
        verdict = judge_recorded(result, chance, classes)
        if verdict.status != result.status:
            print(f"{folder.name}/{run_id}: {result.status} -> {verdict.status} ({verdict.reason})")
        result.status, result.reason = verdict.status, verdict.reason
        write_run(run_dir, result)
        rows.append(summary_row(PlannedRun(run_id, label, config), result))
    if rows:
        write_atomic(summary, summary_csv(rows))


def set_user_attrs(storage: str, study_name: str, number: int, attrs: dict) -> None:
    """User attributes of a finished trial, written into the storage's database itself (SQLite,
    PostgreSQL...: the trial found through Optuna's API, ``lbtrain.reports.tuning``): Optuna's API
    refuses to change a finished trial, which is right for live studies and wrong for this
    one-off re-judging. A journal file cannot be re-judged: replaying it refuses the change too."""
    if storage.startswith(JOURNAL):
        raise SystemExit(f"{storage}: a journal storage cannot change a finished trial's user attributes")
    reader = read_only_storage(storage)
    trial_id = reader.get_trial_id_from_study_id_trial_number(reader.get_study_id_from_name(study_name), number)
    engine = sqlalchemy.create_engine(sqlalchemy_url(storage))
    try:
        with engine.begin() as connection:
            for key, value in attrs.items():
                connection.execute(sqlalchemy.text("DELETE FROM trial_user_attributes WHERE trial_id = :trial AND key = :key"),
                                   {"trial": trial_id, "key": key})
                connection.execute(sqlalchemy.text("INSERT INTO trial_user_attributes (trial_id, key, value_json) "
                                                   "VALUES (:trial, :key, :value)"),
                                   {"trial": trial_id, "key": key, "value": json.dumps(value)})
    finally:
        engine.dispose()


def rejudge_sweep(folder: Path) -> None:
    from lbtrain.studies.sweep import open_study, trial_run, world_sizes, write_outputs

    experiment = load_experiment(folder / EXPERIMENT_FILE)
    storage = results_storage(folder)
    cache: dict = {}
    for world_size in world_sizes(experiment):
        study = open_study(experiment, world_size, storage)
        for trial in study.get_trials(deepcopy=False):
            attrs = {}
            if trial.state == optuna.trial.TrialState.PRUNED:
                attrs["status"] = "diverged" if trial.user_attrs.get("reason", "").startswith("loss") else "ok"
            elif trial.state == optuna.trial.TrialState.COMPLETE:
                chance, _ = dataset_facts(trial_run(experiment, world_size, trial.params), cache)
                attrs["status"] = "collapsed" if trial.value <= chance + DEFAULT_COLLAPSE_MARGIN else "ok"
                if attrs["status"] == "collapsed":
                    attrs["reason"] = f"validation accuracy {trial.value:.3g} is within {DEFAULT_COLLAPSE_MARGIN:g} of chance ({chance:.3g})"
            if attrs and trial.user_attrs.get("status") != attrs["status"]:
                print(f"{study.study_name} trial {trial.number}: {trial.user_attrs.get('status', 'unjudged')} -> {attrs['status']}")
                set_user_attrs(storage, study.study_name, trial.number, attrs)
    record = (folder / EXPERIMENT_FILE).read_text()
    write_outputs(experiment, storage)
    # write_outputs writes the experiment again with every field today has; the study ran under the record.
    write_atomic(folder / EXPERIMENT_FILE, record)


def main(arguments: list[str]) -> None:
    rewrite = "--rewrite-records" in arguments
    folders = [argument for argument in arguments if argument != "--rewrite-records"]
    targets = [Path(f) for f in folders] or sorted(p.parent for p in Path("results").glob(f"*/{EXPERIMENT_FILE}"))
    for folder in targets:
        if not rewrite:
            rejudge_verdicts(folder)
            continue
        migrate_experiment(folder)
        rejudge_runs(folder)
        # A protocol's trials were judged as they trained (its folder has no sweep outputs to write).
        if results_storage(folder) is not None and not (folder / PROTOCOL_FILE).is_file():
            rejudge_sweep(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
