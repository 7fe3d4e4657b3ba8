"""Numbers in prose come from the data: a check that every number a report's sentences state
is one of its table cells or one of the values in its JSON record.

A report renders each sentence from computed records (``lbtrain.reports.report``); this
check is what keeps a hand-written number out. The rules:

- *prose* is every line of the Markdown that is not a table row (``|``), an image (``![``) or a
  quotation (``>``: the experiment author's own description, quoted as written);
- inside prose, inline code (formulas such as ``S(B) = S_min (1 + B_crit / B)``, identifiers)
  and citation years (``McCandlish et al. 2018``) are not statements of data;
- a stated number with ``d`` decimals is supported when some source value rounds to it at ``d``
  decimals; in a line that speaks of percentages or points (``%``, "point"), 100 times a source
  value may too (0.0218 stated as "2.2 points");
- the sources are the numbers in every table cell and every number in the JSON record,
  including numbers inside its strings (a run's recorded reason, a budget such as "20 epochs").
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable

from lbtrain.rounding import ROUNDING_TOLERANCE

NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
CODE = re.compile(r"`[^`]*`")
CITATION = re.compile(r"\bet al\. \d{4}\b")


def prose_lines(markdown: str) -> list[str]:
    """The lines of ``markdown`` that are prose (module doc), inline code and citations removed."""
    lines = []
    for line in markdown.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("|", "![", ">")):
            continue
        lines.append(CITATION.sub("", CODE.sub("", line)))
    return lines


def numbers_in(text: str) -> list[str]:
    """The number tokens of ``text`` as written ("0.884", "-3", "1.043e+04", "4.1"); a unicode
    minus reads as ``-``."""
    return [token.replace("−", "-") for token in NUMBER.findall(text)]


def _json_numbers(value: Any) -> Iterable[float]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            yield float(value)
    elif isinstance(value, str):
        yield from (float(token) for token in numbers_in(value))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _json_numbers(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _json_numbers(item)


def source_numbers(markdown: str, record: Any) -> list[float]:
    """Every number in the table cells of ``markdown`` and in ``record`` (plain JSON data)."""
    cells = [float(token) for line in markdown.splitlines() if line.lstrip().startswith("|") for token in numbers_in(line)]
    return cells + list(_json_numbers(json.loads(json.dumps(record))))


def _decimals(token: str) -> int:
    mantissa = token.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def supported(token: str, sources: Iterable[float], percent: bool = False) -> bool:
    """Whether some source value (or, with ``percent``, 100 times it) rounds to ``token`` at
    its precision (``1.043e+04`` at four significant digits)."""
    stated = float(token)
    if "e" in token.lower():
        tolerance = 0.5 * 10.0 ** (math.floor(math.log10(abs(stated))) - _decimals(token)) if stated else 0.0
    else:
        tolerance = 0.5 * 10.0 ** -_decimals(token)
    tolerance += ROUNDING_TOLERANCE * max(1.0, abs(stated))
    return any(abs(value - stated) <= tolerance or (percent and abs(100 * value - stated) <= tolerance) for value in sources)


def unsupported_numbers(markdown: str, record: Any) -> list[tuple[str, str]]:
    """``(number, line)`` for every number stated in the prose of ``markdown`` that no table cell
    and no value of ``record`` supports; empty when every number comes from the data."""
    sources = source_numbers(markdown, record)
    return [(token, line) for line in prose_lines(markdown) for token in numbers_in(line)
            if not supported(token, sources, percent="%" in line or "point" in line)]
