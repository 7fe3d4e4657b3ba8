"""``lbtrain run``'s own options: ``--workers`` (auto or N), ``--price`` (the runs left to
train, priced by a probe, nothing trained) and ``--dry-run``'s price (measured where the runs use
lbtrain's models and datasets only; otherwise a line pointing to ``--price``, no code of the
user's called)."""

import re
import textwrap

import pytest
import yaml

EXPERIMENT = {
    "name": "priced",
    "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [16]}},
    "optimizer": {"name": "momentum"},
    "lr": {"base_lr": 0.1, "base_batch": 16},
    "training": {"per_worker_batch": 16, "epochs": 2},
    "grid": {"world_sizes": [1, 2], "variants": [{"label": "none", "lr.rule": "none"}, {"label": "linear", "lr.rule": "linear"}]},
}


def experiment_file(tmp_path):
    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, "output_dir": str(tmp_path / "results")}))
    return str(path)


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_bad_workers_are_one_line_errors_naming_what_is_allowed(tmp_path, lbtrain_here, value):
    completed = lbtrain_here("run", experiment_file(tmp_path), "--workers", value)
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [f"lbtrain: error: argument --workers: expected auto or a whole number >= 1, got '{value}'"]
    assert not (tmp_path / "results").exists()


def test_price_lists_the_runs_and_prices_them_from_a_probe_training_nothing(tmp_path, lbtrain_here, monkeypatch):
    monkeypatch.setenv("LBTRAIN_WORKERS", "2")
    completed = lbtrain_here("run", experiment_file(tmp_path), "--price")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"priced: 4 runs (simulated) -> {tmp_path / 'results' / 'priced'}" and len(lines) == 6
    price = re.fullmatch(r"price: about (\d+)s of machine time for 4 runs left to train, one after another on this machine "
                         r"\(from a probe of 10 steps at each of 2 global batches and a process start\); "
                         r"2 at a time here \((\d) TensorFlow threads? per process\): a wall time from about (\d+)s .*", lines[-1])
    assert price, lines[-1]
    assert int(price.group(3)) <= int(price.group(1))
    assert "price probe: 10 steps at global batch 16" in completed.stderr and "global batch 32" in completed.stderr
    assert not (tmp_path / "results").exists()


PRICE_LINE = (r"price: about (\d+)s of machine time for (\d+) runs? left to train, one after another on this machine "
              r"\(from a probe of 10 steps at each of (\d+) global batch(es)? and a process start\); .*")


def test_dry_run_prices_the_runs_of_lbtrains_own_model_and_data(tmp_path, lbtrain_here):
    completed = lbtrain_here("run", experiment_file(tmp_path), "--dry-run")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"priced: 4 runs (simulated) -> {tmp_path / 'results' / 'priced'}" and len(lines) == 6
    price = re.fullmatch(PRICE_LINE, lines[-1])
    assert price and int(price.group(1)) > 0 and price.group(2) == "4" and price.group(3) == "2", lines[-1]
    assert not (tmp_path / "results").exists()


USER_PACKAGE = {
    "__init__.py": "",
    # The functions write a file when they run (validation imports the module to read their signatures).
    "models.py": """
        from pathlib import Path

        import lbtrain

        def build(input_shape, num_classes, width=8):
            Path("FACTORY_RAN").write_text("the model factory ran")
            import keras
            inputs = keras.Input(shape=input_shape)
            return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Dense(width)(inputs)))

        @lbtrain.register_model("mine")
        def registered(input_shape, num_classes):
            return build(input_shape, num_classes)
    """,
    "data.py": """
        from pathlib import Path

        import numpy as np

        def load(samples=64):
            Path("LOADER_RAN").write_text("the loader ran")
            rng = np.random.default_rng(0)
            return {"x_train": rng.normal(size=(samples, 4)).astype("float32"), "y_train": np.arange(samples) % 2}
    """,
}


@pytest.mark.parametrize("changes, flags, yours", [
    ({"model": {"name": "userpkg.models:build", "options": {"width": 4}}}, [], "model 'userpkg.models:build'"),
    ({"data": {"dataset": "userpkg.data:load", "options": {"samples": 64}}}, [], "dataset 'userpkg.data:load'"),
    ({"imports": ["userpkg.models"], "model": {"name": "mine"}}, [], "imports userpkg.models"),
    # A module imported changes what may train, even where the runs name lbtrain's model.
    ({}, ["--import", "userpkg.models"], "imports userpkg.models"),
], ids=["reference", "dataset", "registered", "--import"])
def test_dry_run_of_your_code_says_to_use_price_and_runs_none_of_it(tmp_path, lbtrain_here, monkeypatch, changes, flags, yours):
    from lbtrain.references import MODEL_REGISTRY

    # The registration and its export to children are undone after the test.
    monkeypatch.setattr(MODEL_REGISTRY, "_functions", dict(MODEL_REGISTRY._functions))
    monkeypatch.setenv(MODEL_REGISTRY.environment_variable, "")
    monkeypatch.delenv(MODEL_REGISTRY.environment_variable)
    package = tmp_path / "userpkg"
    package.mkdir()
    for name, text in USER_PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text))
    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, "output_dir": str(tmp_path / "results"), **changes}))
    completed = lbtrain_here("run", str(path), "--dry-run", *flags, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert len(lines) == 6 and lines[-1] == (f"price: needs your model or data to run ({yours}), which --dry-run never does: "
                                             "--price prices the runs from a probe of a few steps at each global batch, here")
    assert "price probe" not in completed.stderr
    assert not (tmp_path / "FACTORY_RAN").exists() and not (tmp_path / "LOADER_RAN").exists()
    assert not (tmp_path / "results").exists()
