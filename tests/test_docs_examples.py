"""Every Python example of the documentation runs (issue #34): each ```python block of README.md
and of the MkDocs pages (docs/**/*.md; not docs/api/, which holds only ``::: module`` lines).

A page's blocks run in order in one fresh Python process, sharing their names as a reader who
pastes them one after the other would, in an empty temporary folder with a private
``$XDG_CACHE_HOME`` and ``TF_CPP_MIN_LOG_LEVEL=2``. A block that says what it prints or results
in asserts it itself (``assert result.status == "ok"``), so a page passes when its process exits
0. Each block is compiled under the page's path with its own line numbers: a traceback names the
page and the line of the example.

A block that cannot run as printed (it needs the reader's own package) is marked by the line
right before its fence, ``<!-- example: not run (why) -->`` (an HTML comment: the site does not
show it); it must still compile, and such marks stay few (``MAX_NOT_RUN``).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, stderr_lines

FENCE = re.compile(r"^(?P<indent>\s*)```python\s*$")
NOT_RUN = re.compile(r"^\s*<!-- example: not run \((?P<reason>.*)\) -->\s*$")
NOT_RUN_START = "<!-- example: not run"
# Marks are for the reader's placeholders only: every other example runs.
MAX_NOT_RUN = 3


@dataclasses.dataclass(frozen=True)
class Example:
    page: str  # relative to the repository
    line: int  # the line of the fence, 1-based
    source: str
    not_run: str | None  # the reason given by the mark before the fence


def pages() -> list[str]:
    """README.md and the site's pages, relative to the repository."""
    docs = sorted(os.path.relpath(path, REPO_ROOT) for path in glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"),
                                                                        recursive=True))
    return ["README.md"] + [page for page in docs if not page.startswith(os.path.join("docs", "api") + os.sep)]


def examples(page: str) -> list[Example]:
    """The ```python blocks of ``page``, in order."""
    with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as file:
        lines = file.read().splitlines()
    found, index = [], 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        indent, start = fence.group("indent"), index
        index += 1
        while index < len(lines) and lines[index].strip() != "```":
            index += 1
        if index == len(lines):
            raise AssertionError(f"{page}:{start + 1}: a ```python block that never ends")
        source = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[start + 1:index])
        mark = NOT_RUN.match(lines[start - 1]) if start > 0 else None
        found.append(Example(page, start + 1, source + "\n", mark.group("reason").strip() if mark else None))
        index += 1
    return found


PAGES = {page: examples(page) for page in pages()}
ALL_EXAMPLES = [example for found in PAGES.values() for example in found]

# Runs a page's blocks (JSON: [path, fence line, source]) in one fresh ``__main__`` module, as
# ``python`` runs a script: a block's functions and classes belong to ``__main__``.
RUNNER = """
import json, sys, types

def run(blocks):
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    for path, fence_line, source in blocks:
        print(f"--- example at {path}:{fence_line}", flush=True)
        exec(compile("\\n" * fence_line + source, path, "exec"), main.__dict__)

with open(sys.argv[1], encoding="utf-8") as file:
    run(json.load(file))
"""


def test_the_examples_are_found():
    """The parser sees the README's block and those of the guide pages (a parser that found
    nothing would pass every other test here)."""
    assert ALL_EXAMPLES, "no ```python block found in README.md or docs/"
    assert "README.md" in {example.page for example in ALL_EXAMPLES}
    assert len({example.page for example in ALL_EXAMPLES}) >= 3


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=[f"{example.page}:{example.line}" for example in ALL_EXAMPLES])
def test_every_example_is_python(example):
    """Every block compiles, the ones not run included: no ``model.compile(..., ...)``."""
    try:
        compile("\n" * example.line + example.source, os.path.join(REPO_ROOT, example.page), "exec")
    except SyntaxError as error:
        pytest.fail(f"{example.page}:{error.lineno}: the example is no Python: {error.msg}")


def test_examples_not_run_are_marked_before_their_fence_say_why_and_are_few():
    """A mark stands on the line right before a ```python fence and gives its reason; an
    ill-formed or stray mark would silently run (or skip) something else."""
    marked_lines = {(example.page, example.line - 1) for example in ALL_EXAMPLES if example.not_run is not None}
    for page in PAGES:
        with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as file:
            for number, line in enumerate(file, start=1):
                if NOT_RUN_START in line and (page, number) not in marked_lines:
                    pytest.fail(f"{page}:{number}: {line.strip()!r} is not '<!-- example: not run (why) -->' "
                                f"on the line right before a ```python fence")
    not_run = [example for example in ALL_EXAMPLES if example.not_run is not None]
    assert all(example.not_run for example in not_run), [f"{example.page}:{example.line}" for example in not_run]
    assert len(not_run) <= MAX_NOT_RUN, (
        f"{len(not_run)} of {len(ALL_EXAMPLES)} examples are not run: "
        + "; ".join(f"{example.page}:{example.line} ({example.not_run})" for example in not_run))


PAGES_WITH_EXAMPLES = [page for page, found in PAGES.items() if found]


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES)
def test_a_pages_examples_run_in_order_in_a_fresh_process(page, tmp_path):
    """The page's blocks, pasted in order into one fresh Python: it exits 0 (each block asserts
    what its text says)."""
    found = PAGES[page]
    runnable = [example for example in found if example.not_run is None]
    if not runnable:
        pytest.skip(f"{page}: every example is marked not run: " + "; ".join(example.not_run for example in found))
    work = tmp_path / "work"
    work.mkdir()
    blocks = tmp_path / "blocks.json"
    blocks.write_text(json.dumps([[os.path.join(REPO_ROOT, example.page), example.line, example.source]
                                  for example in runnable]), encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    completed = subprocess.run([sys.executable, "-c", RUNNER, str(blocks)], capture_output=True, text=True, cwd=work,
                               env=env, timeout=600)
    started = [line[len("--- example at "):] for line in completed.stdout.splitlines() if line.startswith("--- example at ")]
    if completed.returncode != 0:
        pytest.fail(f"{page}: the example at {started[-1] if started else '?'} failed "
                    f"({len(found) - len(runnable)} of {len(found)} marked not run):\n"
                    + "\n".join(stderr_lines(completed.stderr)[-30:]), pytrace=False)
    assert len(started) == len(runnable)
