"""The layout's contract: data flows one way through lbtrain's layers, no module imports one
above it, there is no import cycle, the config, the mode registry and the reports load no
TensorFlow, and no module but the registry compares mode names.

Imports are read from the source (every ``import`` statement, at module level or inside a
function, but not those under ``if TYPE_CHECKING:``), so a lazy import counts as an arrow too.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lbtrain.launch import launchers
from lbtrain.worlds.modes import MODE_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "lbtrain"
ARCHITECTURE_PAGE = PACKAGE.parent / "docs" / "architecture.md"
# Bottom to top: a module may import its own layer and those below it, never one above.
LAYERS = (
    ("foundation", ("lbtrain._lazy", "lbtrain._registration", "lbtrain.errors", "lbtrain.files", "lbtrain.spelling",
                    "lbtrain.recipe", "lbtrain.scaling", "lbtrain.mode_names", "lbtrain.modes", "lbtrain.worlds.modes", "lbtrain.logs", "lbtrain.measures.noise_scale",
                    "lbtrain.measures.steps_to_target", "lbtrain.launch.error_line", "lbtrain.results", "lbtrain.storage_urls", "lbtrain.references",
                    "lbtrain.rounding", "lbtrain.verdict", "lbtrain.config.limits")),
    ("keras library", ("lbtrain._keras", "lbtrain.kernels", "lbtrain.layers", "lbtrain.schedules", "lbtrain.elastic", "lbtrain.optimizers", "lbtrain.models",
                       "lbtrain.data", "lbtrain.objectives", "lbtrain.measures", "lbtrain.train_step", "lbtrain.precise_bn")),
    ("config", ("lbtrain.config",)),
    ("callbacks", ("lbtrain.callbacks",)),
    ("reports", ("lbtrain.reports",)),
    ("worlds", ("lbtrain.worlds",)),
    ("trainer", ("lbtrain.trainer",)),
    ("launch", ("lbtrain.launch",)),
    ("studies", ("lbtrain.studies",)),
    ("bench", ("lbtrain.bench",)),
    ("command line", ("lbtrain.cli", "lbtrain")),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def imports_of(name: str) -> set[str]:
    """The lbtrain modules ``name`` imports (the most specific module each import names)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [[alias.name] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            candidates = [[f"{base}.{alias.name}", base] for alias in node.names]
        else:
            continue
        for options in candidates:
            target = next((option for option in options if option in MODULES), None)
            if target is not None and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer_of(name: str) -> int:
    """The layer of the most specific prefix that names ``name``."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # "lbtrain" itself names the package's __init__ (its lazy public names), not all of it.
            covers = name == prefix or (prefix != "lbtrain" and name.startswith(prefix + "."))
            if covers and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best is not None, f"{name} belongs to no layer: add it to LAYERS"
    return best


def test_every_module_has_a_layer():
    assert len(MODULES) > 50
    for name in MODULES:
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own():
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
              for name, targets in GRAPH.items() for target in targets
              if layer_of(target) > layer_of(name) and not name.startswith(target + ".")]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    state: dict[str, int] = {}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(GRAPH[name]):
            # A package imports its own modules to re-export them; they import the package's
            # siblings, not the package.
            if state.get(target) == 1 and not target == name.rpartition(".")[0]:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_a_layer_test_would_see_an_upward_import():
    """The checks above can fail: the config importing the trainer would be upward."""
    assert layer_of("lbtrain.trainer") > layer_of("lbtrain.config.run")
    assert "lbtrain.config" in GRAPH["lbtrain.trainer"]


@pytest.mark.parametrize("modules", ["lbtrain.config", "lbtrain.worlds.modes, lbtrain.launch.launchers", "lbtrain.reports, lbtrain.reports.report, "
                                     "lbtrain.reports.comparison, lbtrain.reports.tables", "lbtrain.results, lbtrain.cli",
                                     "lbtrain.measures.noise_scale, lbtrain.measures.steps_to_target"])
def test_these_modules_load_without_tensorflow(modules):
    code = f"import sys, {modules}; print('tensorflow' in sys.modules, 'keras' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.split() == ["False", "False"]


def _compares_with(node: ast.Compare, words: set[str] | tuple[str, ...]) -> bool:
    """Whether a comparison has one of ``words`` as an operand (or in a tuple, list or set operand)."""
    operands = [node.left, *node.comparators]
    for operand in operands:
        values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
        if any(isinstance(value, ast.Constant) and value.value in words for value in values):
            return True
    return False


def comparisons_with(words: set[str] | tuple[str, ...], outside: str) -> list[str]:
    """``module:line`` of every comparison with one of ``words`` in a module outside ``outside``."""
    return [f"{name}:{node.lineno}" for name, path in MODULES.items() if name != outside and not name.startswith(outside + ".")
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Compare) and _compares_with(node, words)]


def test_no_mode_name_is_compared_outside_the_registry():
    assert comparisons_with(MODE_NAMES, "lbtrain.worlds.modes") == []


# The ways processes start, as the words lbtrain compared before they were launcher classes, and
# the classes' own names.
LAUNCH_WORDS = {"isolated", "child", "fresh_process", "horovodrun", "independent", "tf_cluster", "parameter_server_job",
                *(name for name in dir(launchers) if name.endswith("Launcher"))}


def test_no_launch_kind_is_told_apart_outside_lbtrain_launch():
    """The plan, the runner and the bench ask a mode's launcher; they never compare how it starts."""
    assert comparisons_with(LAUNCH_WORDS, "lbtrain.launch") == []
    isinstance_checks = [f"{name}:{node.lineno}" for name, path in MODULES.items() if not name.startswith("lbtrain.launch")
                         for node in ast.walk(ast.parse(path.read_text()))
                         if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                         and any(getattr(part, "id", getattr(part, "attr", None)) in LAUNCH_WORDS for part in ast.walk(node.args[1]))]
    assert isinstance_checks == []


def test_a_comparison_test_would_see_a_launch_kind(tmp_path):
    compare = ast.parse('mode.launch == "horovodrun" or kind in ("tf_cluster", "x")').body[0].value
    assert [_compares_with(node, LAUNCH_WORDS) for node in compare.values] == [True, True]


def test_every_public_module_is_in_the_api_reference():
    """The API reference (docs/api/, mkdocstrings) names every module but private and entry-point ones."""
    documented = {line.split()[1] for page in (PACKAGE.parent / "docs" / "api").glob("*.md")
                  for line in page.read_text().splitlines() if line.startswith("::: ")}
    public = {name for name in MODULES if not any(part.startswith("_") for part in name.split("."))}
    assert sorted(public - documented) == []


def documented_tree() -> dict[str, str]:
    """docs/architecture.md's package tree: each entry (``name.py`` or ``folder/``) and its
    description, continuation lines joined."""
    text = ARCHITECTURE_PAGE.read_text()
    opening = "```text\nlbtrain/\n"
    block = text[text.index(opening) + len(opening):]
    entries: dict[str, str] = {}
    name = None
    for line in block[:block.index("```")].splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name, _, description = line[2:].partition(" ")
            entries[name] = description.strip()
        else:
            entries[name] += " " + line.strip()
    return entries


def package_entries(folder: Path) -> set[str]:
    """A folder's modules (``name.py``) and subpackages (``name/``), as the tree names them."""
    return {path.name + ("/" if path.is_dir() else "") for path in folder.iterdir()
            if (path.suffix == ".py" and path.name != "__init__.py") or (path.is_dir() and (path / "__init__.py").is_file())}


def test_the_architecture_pages_tree_names_every_module_and_nothing_else():
    """A new module needs a line in the tree (or its name in its folder's line); a moved or
    deleted one, its line gone."""
    tree = documented_tree()
    assert len(tree) > 30
    assert sorted(tree) == sorted(package_entries(PACKAGE))
    folders = {name: set(re.findall(r"\b\w+\.py\b|\b\w+/", description)) for name, description in tree.items() if name.endswith("/")}
    assert {name: sorted(named) for name, named in folders.items()} == {
        name: sorted(package_entries(PACKAGE / name)) for name in folders}


def documented_layers() -> list[tuple[str, tuple[str, ...]]]:
    """docs/architecture.md's layer table: each row's layer and modules, bottom to top."""
    text = ARCHITECTURE_PAGE.read_text()
    rows = text[text.index("| layer | modules |"):].split("\n\n")[0].splitlines()[2:]
    return [(cells[0].strip(), tuple(re.findall(r"`([\w.]+)`", cells[1]))) for cells in (row.strip("|").split("|") for row in rows)]


def test_the_architecture_pages_layer_table_is_layers():
    assert documented_layers() == [(name, tuple(module.removeprefix("lbtrain.") for module in modules)) for name, modules in LAYERS]


def test_the_readme_stays_a_front_page():
    """Explanations and tables live in docs/; the README keeps at most 150 lines and links there."""
    readme = (PACKAGE.parent / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "(docs/benchmarks.md)" in readme and "(docs/architecture.md)" in readme
