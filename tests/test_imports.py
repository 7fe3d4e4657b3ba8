"""An experiment's ``imports:`` (and the command line's ``--import``) import the user's modules
before anything is checked, so the names they register with ``lbtrain.register_model`` work from
the command line, in every process a run starts (issue #53, item 6; before, only the undocumented
``LBTRAIN_REGISTERED_MODELS`` or an installed entry point reached the CLI)."""

import sys
import textwrap

import pytest
import yaml

from lbtrain.cli import main
from lbtrain.config import ConfigError, load_experiment
from lbtrain.references import MODEL_REGISTRY

MODULE = """
    import keras
    import lbtrain

    @lbtrain.register_model("imported-net")
    def build(input_shape, num_classes, width=8):
        inputs = keras.Input(input_shape)
        hidden = keras.layers.Dense(width, activation="relu")(keras.layers.Flatten()(inputs))
        return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))
    """


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The working folder, holding the user's package ``netpkg`` (found there, as from the CLI);
    the registration and its export are undone after the test."""
    (tmp_path / "netpkg").mkdir()
    (tmp_path / "netpkg" / "__init__.py").write_text("")
    (tmp_path / "netpkg" / "models.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(MODEL_REGISTRY, "_functions", dict(MODEL_REGISTRY._functions))
    monkeypatch.setenv(MODEL_REGISTRY.environment_variable, "")
    monkeypatch.delenv(MODEL_REGISTRY.environment_variable)
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("netpkg")]:
        del sys.modules[name]


def experiment(folder, **changes):
    spec = {"name": "imported", "output_dir": str(folder / "results"), "model": {"name": "imported-net", "options": {"width": 4}},
            "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 400}},
            "training": {"per_worker_batch": 32, "epochs": 1}, **changes}
    path = folder / "imported.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_imports_make_a_registered_model_trainable_from_the_command_line(folder, capsys):
    assert main(["run", str(experiment(folder, imports=["netpkg.models"]))]) == 0
    progress = capsys.readouterr().err
    # It trained (one epoch of a 4-wide net: near chance, which the verdict calls collapsed, not failed).
    assert "base w1 x 32 seed 0: " in progress and "test acc" in progress and "failed" not in progress


def test_without_imports_the_name_is_unknown_and_the_error_says_how(folder, capsys):
    assert main(["run", str(experiment(folder))]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lbtrain: error: ") and "unknown model 'imported-net'" in error and error.count("\n") == 1


@pytest.mark.parametrize(("imports", "message"), [
    (["os"], r"imports 'os' names Python's standard library \(os\)"),
    (["no_such_module_q"], r"imports: importing no_such_module_q failed \(ModuleNotFoundError"),
    (["not a module"], r"imports: 'not a module' is no module name \(write package.module\)"),
])
def test_a_bad_import_is_one_line_before_anything_runs(folder, imports, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_experiment(experiment(folder, imports=imports))
    assert "\n" not in str(error.value)


def test_the_command_lines_import_does_the_same(folder, capsys):
    path = str(experiment(folder))
    assert main(["run", path, "--dry-run", "--import", "netpkg.models"]) == 0
    assert "imported-net" in MODEL_REGISTRY.names()
    capsys.readouterr()
    assert main(["run", path, "--import", "os"]) == 2
    assert capsys.readouterr().err == ("lbtrain: error: --import 'os' names Python's standard library (os); a reference names "
                                       "a function of your own module or of an installed package\n")
