"""A griffe extension for the API reference: doctest examples in docstrings become console code
blocks.

lbtrain's docstrings hold doctests (``>>>`` lines and their output) in their prose, where pytest
runs them. Rendered as Markdown, a ``>>>`` line would be a nested block quote and a list in its
output a reference link, so each run of ``>>>``/``...`` lines with the output after it, up to a
blank line, is wrapped in a ``pycon`` fence. A Google-style ``Examples:`` section is left to
griffe, which renders its doctests itself (``Example:``, singular, is an admonition to griffe,
whose body is Markdown like the rest).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SECTION = re.compile(r"^\s*Examples:\s*$")


def fence_doctests(text: str) -> str:
    """``text`` with each doctest run wrapped in a ``pycon`` fence at its own indentation."""
    out: list[str] = []
    indent: int | None = None  # the open fence's indentation, None when no fence is open
    for number, line in enumerate(text.split("\n")):
        if _SECTION.match(line):
            if indent is not None:
                out.append(" " * indent + "```")
            return "\n".join(out + text.split("\n")[number:])
        stripped = line.lstrip(" ")
        margin = len(line) - len(stripped)
        if indent is not None and (not stripped or margin < indent):
            out.append(" " * indent + "```")
            if stripped:
                out.append("")
            indent = None
        if indent is None and stripped.startswith(">>>"):
            if out and out[-1].strip():
                out.append("")
            indent = margin
            out.append(" " * indent + "```pycon")
        out.append(line)
    if indent is not None:
        out.append(" " * indent + "```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the doctests of every docstring griffe reads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
