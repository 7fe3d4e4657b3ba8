"""The trust model (docs/own-model.md, Trust): a reference never resolves into Python's standard
library, builtins or lbtrain's own code, refused in one line before anything is imported or called; validation and
``--dry-run`` call no loader and no model factory; a module that exits on import is one line."""

import re
import textwrap

import pytest
import yaml

from helpers import snapshot

GOOD = {
    "name": "trust",
    "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [16]}},
    "lr": {"base_lr": 0.1, "base_batch": 16},
    "training": {"per_worker_batch": 16, "epochs": 1},
}

# What each hostile reference would do if called: make MARKER, empty VICTIM, delete FOLDER.
HOSTILE = {
    "os:system": ("data", {"dataset": "os:system", "options": {"command": "touch MARKER"}}),
    "subprocess:call": ("data", {"dataset": "subprocess:call", "options": {"args": ["touch", "MARKER"]}}),
    "builtins:open": ("data", {"dataset": "builtins:open", "options": {"file": "VICTIM", "mode": "w"}}),
    "shutil:rmtree": ("data", {"dataset": "shutil:rmtree", "options": {"path": "FOLDER"}}),
    "os.path submodule": ("data", {"dataset": "os.path:exists", "options": {"path": "VICTIM"}}),
    "builtins:print as a model": ("model", {"name": "builtins:print"}),
    "a private builtin module": ("data", {"dataset": "_posixsubprocess:fork_exec"}),
    "os through a user's module": ("data", {"dataset": "imports_os:os.system", "options": {"command": "touch MARKER"}}),
    "a re-exported stdlib function": ("data", {"dataset": "imports_os:call", "options": {"args": ["touch", "MARKER"]}}),
    "a stdlib class": ("model", {"name": "imports_os:Path"}),
    "lbtrain's own writer": ("data", {"dataset": "lbtrain.files:write_atomic", "options": {"path": "MARKER", "content": "x"}}),
}


@pytest.fixture
def folder(tmp_path):
    """A user's folder: a victim file and folder, and a module that imports os and subprocess."""
    (tmp_path / "VICTIM").write_text("precious")
    (tmp_path / "FOLDER").mkdir()
    (tmp_path / "FOLDER" / "kept.txt").write_text("kept")
    (tmp_path / "imports_os.py").write_text("import os\nfrom pathlib import Path\nfrom subprocess import call\n")
    return tmp_path


def _experiment(folder, section, settings):
    data = {**GOOD, "output_dir": str(folder / "results"), section: {**GOOD[section], **settings}}
    if section == "model":
        data["model"] = settings
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_reference_into_the_standard_library_is_refused_before_it_acts(folder, lbtrain_here, case, dry_run):
    section, settings = HOSTILE[case]
    path = _experiment(folder, section, settings)
    before = snapshot(folder)
    completed = lbtrain_here("run", str(path), *(["--dry-run"] if dry_run else []), cwd=folder)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300, completed.stderr
    assert re.match(r"lbtrain: error: (data\.dataset|model\.name): (dataset|model) '[\w.:]+' names (Python's standard "
                    r"library \(\w+\)|lbtrain's own code \(lbtrain.files\))", lines[0]), lines[0]
    assert snapshot(folder) == before  # no MARKER, VICTIM intact, FOLDER there, no results
    assert completed.stdout == ""


def test_validation_and_dry_run_call_no_loader_and_no_factory(tmp_path, lbtrain_here):
    """The module is imported (its signature is read) but neither function runs; the run itself calls both."""
    (tmp_path / "userdata.py").write_text(textwrap.dedent("""
        from pathlib import Path
        import numpy as np

        def load(samples=64):
            Path("LOADED").write_text("loader ran")
            rng = np.random.default_rng(0)
            return {"x_train": rng.normal(size=(samples, 4)), "y_train": np.arange(samples) % 2}

        def build(input_shape, num_classes, width=8):
            Path("BUILT").write_text("factory ran")
            import tensorflow as tf
            inputs = tf.keras.Input(input_shape)
            return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(tf.keras.layers.Dense(width)(inputs)))
    """))
    data = {**GOOD, "output_dir": str(tmp_path / "results"), "data": {"dataset": "userdata:load", "options": {"samples": 64}},
            "model": {"name": "userdata:build", "options": {"width": 4}}, "training": {"per_worker_batch": 8, "epochs": 1}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(data))
    completed = lbtrain_here("run", "exp.yaml", "--dry-run", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "1 runs" in completed.stdout
    assert not (tmp_path / "LOADED").exists() and not (tmp_path / "BUILT").exists()
    assert not (tmp_path / "results").exists()
    completed = lbtrain_here("run", "exp.yaml", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "LOADED").is_file() and (tmp_path / "BUILT").is_file()


def test_a_module_that_exits_on_import_is_one_line(tmp_path, lbtrain_here):
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(3)\ndef load():\n    pass\n")
    data = {**GOOD, "output_dir": str(tmp_path / "results"), "data": {"dataset": "quits:load"}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(data))
    completed = lbtrain_here("run", "exp.yaml", cwd=tmp_path)
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and "importing quits failed (SystemExit: 3)" in lines[0] and len(lines[0]) <= 300, completed.stderr
    assert not (tmp_path / "results").exists()


def test_a_loader_is_refused_an_option_its_signature_does_not_declare(tmp_path, lbtrain_here):
    (tmp_path / "strict_loader.py").write_text("from pathlib import Path\ndef load(samples=10):\n    Path('LOADED').touch()\n")
    data = {**GOOD, "output_dir": str(tmp_path / "results"),
            "data": {"dataset": "strict_loader:load", "options": {"samples": 10, "command": "rm -rf /"}}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(data))
    completed = lbtrain_here("run", "exp.yaml", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "lbtrain: error: data.options: unknown option 'command' for dataset 'strict_loader:load' (allowed: samples) "
        "(grid point base)"]
    assert not (tmp_path / "LOADED").exists() and not (tmp_path / "results").exists()
