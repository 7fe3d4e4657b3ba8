"""One-line config errors: ``ConfigError`` and the rendering of a pydantic error as one line."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from lbtrain.config.limits import quote
from lbtrain.errors import ConfigError

__all__ = ["ConfigError", "format_validation_error"]

_TYPE_TAGS = {"str", "float", "int", "bool", "dict", "list", "none", "__root__"}


def format_validation_error(error: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as one line: ``path: what is wrong (got X)``."""
    first = error.errors(include_url=False)[0]
    parts = [str(part) for part in (*([prefix] if prefix else []), *first["loc"])]
    # Union members show up in the location as type tags ("str", "literal['a','b']"): not fields.
    path = ".".join(part for part in parts if part not in _TYPE_TAGS and "[" not in part)
    kind, message = first["type"], first["msg"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key"
    message = message.removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if kind == "value_error" or isinstance(got, (dict, BaseModel)) else f" (got {quote(got)})"
    return f"{path}: {message}{shown}" if path else f"{message}{shown}"

