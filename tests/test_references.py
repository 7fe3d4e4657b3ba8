"""References and registered names resolve alike here, in the current folder, in child
processes, and from entry points; process-local callables are marked so."""

import os
import subprocess
import sys
import textwrap

import pytest

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
