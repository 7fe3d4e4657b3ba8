"""References and registered names resolve alike here, in the current folder, in child
processes, and from entry points; process-local callables are marked so.

An experiment's ``imports:`` (and the command line's ``--import``) import the user's modules
before anything is checked, so the names they register with ``lbtrain.register_model`` work from
the command line, in every process a run starts (issue #53, item 6; before, only the undocumented
``LBTRAIN_REGISTERED_MODELS`` or an installed entry point reached the CLI)."""

import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from lbtrain.cli import main
from lbtrain.config import ConfigError, load_experiment
from lbtrain.references import (
    DATASET_REGISTRY,
    MODEL_REGISTRY,
    ReferenceError_,
    Registry,
    check_options,
    import_reference,
    process_local,
    reference_of,
)


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``userpkg`` in its own folder, importable from sys.path."""
    folder = tmp_path / "site" / "userpkg"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "things.py").write_text(textwrap.dedent("""
        import lbtrain

        VALUE = 3

        def build(input_shape, num_classes, width=4):
            return ("built", tuple(input_shape), num_classes, width)

        @lbtrain.register_model("userpkg-net")
        def registered(input_shape, num_classes):
            return "registered"

        class Factory:
            def make(self):
                return "made"
    """))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    # Importing userpkg.things registers "userpkg-net" in this process and exports it in the
    # environment; both are undone after the test (set then deleted, so monkeypatch restores
    # the variable's absence), or the name would show in other tests' lists of models.
    monkeypatch.setattr(MODEL_REGISTRY, "_functions", dict(MODEL_REGISTRY._functions))
    monkeypatch.setenv(MODEL_REGISTRY.environment_variable, "")
    monkeypatch.delenv(MODEL_REGISTRY.environment_variable)
    yield folder
    for name in [name for name in sys.modules if name.startswith("userpkg")]:
        del sys.modules[name]


def test_a_reference_imports_the_function_it_names(package):
    build = import_reference("userpkg.things:build", "model")
    assert build((2,), 3) == ("built", (2,), 3, 4)
    assert import_reference("userpkg.things:Factory", "model")().make() == "made"


@pytest.mark.parametrize("reference, message", [
    ("nopkg_xyz.models:build", r"^model 'nopkg_xyz.models:build': importing nopkg_xyz.models failed \(ModuleNotFoundError: "
                               r"No module named 'nopkg_xyz'\); put its folder on PYTHONPATH"),
    ("userpkg.things:biuld", r"^model 'userpkg.things:biuld': userpkg.things has no 'biuld' \(did you mean 'build'\?"),
    ("userpkg.things:VALUE", r"^model 'userpkg.things:VALUE' is a int, not a function or class$"),
    ("__main__:build", r"defined in another process's __main__ or inside a function"),
    ("userpkg.things:outer.<locals>.inner", r"defined in another process's __main__ or inside a function"),
])
def test_a_bad_reference_is_one_line_naming_the_problem(package, reference, message):
    with pytest.raises(ReferenceError_, match=message) as error:
        import_reference(reference, "model")
    assert "\n" not in str(error.value)


def test_the_current_folder_is_searched_after_sys_path(tmp_path, monkeypatch):
    (tmp_path / "beside_experiment.py").write_text("def load():\n    return 'here'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    assert import_reference("beside_experiment:load", "dataset")() == "here"
    assert sys.path[-1] == str(tmp_path)
    del sys.modules["beside_experiment"]


def test_reference_of_names_importable_functions_and_marks_the_rest_process_local(package):
    from userpkg.things import build

    assert reference_of(build) == "userpkg.things:build" and not process_local("userpkg.things:build")

    def closure(input_shape, num_classes):
        return None

    first, second = (lambda: 1), (lambda: 2)
    names = [reference_of(closure), reference_of(first), reference_of(second), reference_of(first)]
    assert names[0] == f"{__name__}:test_reference_of_names_importable_functions_and_marks_the_rest_process_local.<locals>.closure"
    assert names[1].endswith("<locals>.<lambda>") and names[2] == names[1] + "#2" and names[3] == names[1]
    assert all(process_local(name) for name in names)
    assert import_reference(names[2], "model")() == 2


def test_a_registered_name_is_exported_to_child_processes(package):
    import userpkg.things

    assert MODEL_REGISTRY.get("userpkg-net") is userpkg.things.registered
    assert "userpkg-net=userpkg.things:registered" in os.environ[MODEL_REGISTRY.environment_variable]
    assert not MODEL_REGISTRY.is_local("userpkg-net")
    child = subprocess.run(
        [sys.executable, "-c", "from lbtrain.references import MODEL_REGISTRY; print(MODEL_REGISTRY.get('userpkg-net')((1,), 2))"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(package.parent)}, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "registered"


def test_a_name_registered_from_main_stays_in_this_process():
    registry = Registry("model", "lbtrain.tests.none", "LBTRAIN_TEST_REGISTERED")

    def local_factory(input_shape, num_classes):
        return "local"

    registry.register("local-net")(local_factory)
    assert registry.get("local-net") is local_factory and registry.is_local("local-net")
    assert "LBTRAIN_TEST_REGISTERED" not in os.environ


def test_entry_points_of_installed_packages_are_found(tmp_path, monkeypatch, package):
    info = tmp_path / "site" / "userpkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userpkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lbtrain.datasets]\nuser-data = userpkg.things:build\n")
    assert "user-data" in DATASET_REGISTRY.names()
    assert DATASET_REGISTRY.get("user-data")((5,), 2) == ("built", (5,), 2, 4)


def test_options_are_checked_against_the_signature(package):
    from userpkg.things import build

    check_options(build, 2, {"width": 8}, "model 'userpkg.things:build'")
    with pytest.raises(ReferenceError_, match=r"unknown option 'widht' for model 'userpkg.things:build' \(did you mean 'width'\? "
                                              r"allowed: width\)"):
        check_options(build, 2, {"widht": 8}, "model 'userpkg.things:build'")
    check_options(lambda input_shape, num_classes, **options: None, 2, {"anything": 1}, "model 'x'")


def test_registered_names_must_not_read_as_references():
    with pytest.raises(ReferenceError_, match="without ':'"):
        MODEL_REGISTRY.register("pkg:name")


# An experiment's imports: and the command line's --import (lbtrain.references.import_modules).
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
