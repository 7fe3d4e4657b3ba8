"""The lab (this repository's own studies) stays outside the library: it takes lbtrain only through
its public API, lbtrain never imports it, and the built wheel holds none of it."""

import ast
import importlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import REPO_ROOT

ROOT = Path(REPO_ROOT)
# Names of this repository's studies and of its lab, none of which belongs in the installed package.
LAB_NAMES = ("results_page", "advisor_validation.py", "lab/", "goyal_v3", "keskar_v3", "third edition")


def documented_modules() -> set[str]:
    """The modules of the API reference (``::: lbtrain.x`` in docs/api/): lbtrain's public modules."""
    return {match for page in (ROOT / "docs" / "api").glob("*.md")
            for match in re.findall(r"^::: (lbtrain[\w.]*)$", page.read_text(), flags=re.MULTILINE)}


def lbtrain_imports(path: Path) -> list[tuple[str, str | None]]:
    """Every ``(module, name)`` a file takes from lbtrain (``name`` None for ``import lbtrain.x``),
    at any depth of the file (imports inside functions too)."""
    imports = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "lbtrain":
            imports += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            imports += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "lbtrain"]
    return imports


def exported_names(module: str) -> list[str] | None:
    """A module's ``__all__``, or None when its source defines none (read first, so that a module
    without one is not imported)."""
    path = ROOT / module.replace(".", "/")
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if "__all__" not in source.read_text():
        return None
    return list(importlib.import_module(module).__all__)


def public_api_violations(path: Path, documented: set[str]) -> list[str]:
    """What ``path`` takes from lbtrain beyond its public API: a module the API reference does
    not document, a private name, or a name missing from the module's ``__all__`` where it has one."""
    problems = []
    for module, name in lbtrain_imports(path):
        if module not in documented:
            problems.append(f"{module} is not a module of the API reference")
        elif name is not None and name.startswith("_"):
            problems.append(f"{module}.{name} is private")
        elif name is not None and (exported := exported_names(module)) is not None and name not in exported:
            problems.append(f"{module}.{name} is not in its __all__")
    return problems


def test_the_lab_takes_lbtrain_only_through_its_public_api():
    documented = documented_modules()
    assert {"lbtrain", "lbtrain.reports", "lbtrain.results"} <= documented
    files = sorted((ROOT / "lab").rglob("*.py"))
    assert len(files) > 10
    problems = {str(path.relative_to(ROOT)): public_api_violations(path, documented) for path in files}
    assert {path: found for path, found in problems.items() if found} == {}


def test_a_private_module_or_name_is_caught(tmp_path):
    script = tmp_path / "uses_internals.py"
    script.write_text("from lbtrain._lazy import lazy_exports\nfrom lbtrain.verdict import _private\n"
                      "from lbtrain.verdict import judge\nimport lbtrain.reports\n\n"
                      "def later():\n    from lbtrain.schedules import NotExported\n")
    assert public_api_violations(script, documented_modules()) == [
        "lbtrain._lazy is not a module of the API reference", "lbtrain.verdict._private is private",
        "lbtrain.schedules.NotExported is not in its __all__"]


def test_lbtrain_never_imports_the_lab():
    importers = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "lbtrain").rglob("*.py"))
                 if any(node.module == "lab" or (node.module or "").startswith("lab.")
                        for node in ast.walk(ast.parse(path.read_text()))
                        if isinstance(node, ast.ImportFrom) and node.level == 0)
                 or re.search(r"^\s*import lab\b", path.read_text(), flags=re.MULTILINE)]
    assert importers == []


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> dict[str, bytes]:
    """The wheel built from a copy of the checkout's sources (setuptools writes build/ beside
    pyproject.toml), lab/ and scripts/ included, so that the packaging's own rule keeps them out:
    every file's name and bytes."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    for folder in ("lbtrain", "lab", "scripts"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "-w", str(tmp_path / "wheel"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "wheel").glob("lbtrain-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_the_wheel_holds_the_library_and_nothing_of_the_lab(wheel_files):
    assert "lbtrain/reports/report.py" in wheel_files and "lbtrain/studies/findings.json" in wheel_files
    assert [name for name in wheel_files if not name.startswith(("lbtrain/", "lbtrain-"))] == []
    assert [name for name in wheel_files if "results_page" in name or "advisor_validation" in name] == []


def test_no_file_of_the_wheel_names_a_study_of_this_repository(wheel_files):
    mentions = {name: [word for word in LAB_NAMES if word in content.decode(errors="replace")]
                for name, content in wheel_files.items() if name.endswith((".py", ".json", ".txt", ".cc"))}
    assert {name: found for name, found in mentions.items() if found} == {}
