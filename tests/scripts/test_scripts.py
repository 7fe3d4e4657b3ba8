"""The scripts under scripts/ are thin entry points over the package and the lab: each one imports
(every name it takes from lbtrain or lab exists) without running, whatever it does when run."""

import importlib.util
from pathlib import Path

import pytest

from helpers import REPO_ROOT

SCRIPTS = sorted(Path(REPO_ROOT, "scripts").glob("*.py"))


def test_there_are_scripts_to_check():
    assert {"render_results_readme.py", "validate_advisor.py", "render_benchmarks.py"} <= {path.name for path in SCRIPTS}


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_a_script_imports_without_running(path):
    assert 'if __name__ == "__main__":' in path.read_text(), f"{path.name} runs when imported"
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None))
