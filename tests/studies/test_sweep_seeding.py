"""Sweep processes started side by side on one storage, without ``--worker``, seed their samplers
apart (each holds its own worker slot) instead of drawing the same trials; a lone sweep keeps
slot 0 and so its reproducible draws."""

import optuna
import yaml

from lbtrain.cli import main
from lbtrain.studies.sweep import worker_slot

SPEC = {
    "name": "seeded",
    "data": {"dataset": "mnist1d", "train_subset": 96, "validation_split": 0.25, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [8]}},
    "training": {"per_worker_batch": 16, "epochs": 1},
    "lr": {"base_batch": 16, "rule": "none"},
    "grid": {"world_sizes": [1]},
    "search": {"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.2, "log": True}},
    "sweep": {"trials": 2, "pruner": "none"},
}


def test_slots_are_the_lowest_free_index_and_freed_at_exit(tmp_path):
    with worker_slot(tmp_path) as first, worker_slot(tmp_path) as second:
        with worker_slot(tmp_path) as third:
            assert (first, second, third) == (0, 1, 2)
    with worker_slot(tmp_path) as again:
        assert again == 0


def _drawn(tmp_path, name, capsys):
    journal = tmp_path / f"{name}.log"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "output_dir": str(tmp_path / "results"), "sweep": {**SPEC["sweep"], "storage": f"journal://{journal}"}}))
    assert main(["sweep", str(path)]) == 0
    capsys.readouterr()
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    return [trial.params["lr.base_lr"] for trial in optuna.load_study(study_name="seeded-w1", storage=storage).trials]


def test_a_second_process_on_a_shared_folder_draws_other_trials(tmp_path, capsys):
    alone = _drawn(tmp_path / "a", "alone", capsys)
    assert _drawn(tmp_path / "b", "alone", capsys) == alone  # a lone sweep draws the same trials again
    folder = tmp_path / "c" / "results" / "seeded"
    folder.mkdir(parents=True)
    with worker_slot(folder):  # another sweep process of this folder, still running
        beside = _drawn(tmp_path / "c", "alone", capsys)
    assert len(beside) == 2 and not set(beside) & set(alone)
