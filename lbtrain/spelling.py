"""Hints for misspelt names: a config key, model option or dataset option that is unknown is
reported with the closest allowed one, the way users of other libraries type theirs."""

from __future__ import annotations

import difflib
from typing import Sequence


def did_you_mean(name: str, allowed: Sequence[str]) -> str:
    """``"did you mean 'x'? "`` for the allowed name closest to ``name`` (difflib's ratio of at
    least 0.6), else ``""``: meant to precede a list of the allowed names.

    >>> did_you_mean("widht", ["widths", "dropout"])
    "did you mean 'widths'? "
    >>> did_you_mean("zzz", ["widths", "dropout"])
    ''
    """
    close = difflib.get_close_matches(name, list(allowed), n=1)
    return f"did you mean {close[0]!r}? " if close else ""
