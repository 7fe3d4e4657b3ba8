"""One-line config errors: ``ConfigError`` and the rendering of a pydantic error as one line."""

from __future__ import annotations

import typing
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from lbtrain.config.limits import quote
from lbtrain.errors import ConfigError
from lbtrain.spelling import did_you_mean

__all__ = ["ConfigError", "format_validation_error"]

_TYPE_TAGS = {"str", "float", "int", "bool", "dict", "list", "none", "__root__"}


def format_validation_error(error: ValidationError, prefix: str = "", schema: type[BaseModel] | None = None,
                            sections: Mapping[str, type[BaseModel]] | None = None) -> str:
    """The first problem of a pydantic error as one line: ``path: what is wrong (got X)``. An
    unknown key of ``schema`` (the model validated; ``sections``: the models of its fields that
    it takes as plain mappings) names the key meant (``_suggestion``)."""
    first = error.errors(include_url=False)[0]
    parts = [str(part) for part in (*([prefix] if prefix else []), *first["loc"])]
    # Union members show up in the location as type tags ("str", "literal['a','b']"): not fields.
    path = ".".join(part for part in parts if part not in _TYPE_TAGS and "[" not in part)
    kind, message = first["type"], first["msg"]
    if kind == "extra_forbidden":
        if schema is None:
            return f"{path}: unknown key"
        key, where = str(first["loc"][-1]), tuple(first["loc"][:-1])
        home = _nested_home(schema, sections or {}, where, key)
        return f"{path}: unknown key" + (f" (did you mean {home!r}?)" if home else _suggestion(key, _allowed_keys(schema, sections or {}, where)))
    message = message.removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if kind == "value_error" or isinstance(got, (dict, BaseModel)) else f" (got {quote(got)})"
    return f"{path}: {message}{shown}" if path else f"{message}{shown}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (itself, or inside ``X | None``, ``list[X]``...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_of(argument)
        if found is not None:
            return found
    return None


def _child(model: type[BaseModel], sections: Mapping[str, type[BaseModel]], top: bool, key: str) -> type[BaseModel] | None:
    """The model of field ``key`` of ``model`` (a top-level field the schema takes as a mapping:
    the model ``sections`` names for it)."""
    if top and key in sections:
        return sections[key]
    field = model.model_fields.get(key)
    return None if field is None else _model_of(field.annotation)


def _model_at(schema: type[BaseModel], sections: Mapping[str, type[BaseModel]], location: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = schema
    for depth, part in enumerate(location):
        if model is None:
            return None
        if not isinstance(part, int):
            model = _child(model, sections, depth == 0, str(part))
    return model


def _allowed_keys(schema: type[BaseModel], sections: Mapping[str, type[BaseModel]], location: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``location`` below ``schema`` takes (empty when it cannot be told):
    what an unknown key's "did you mean" is drawn from."""
    model = _model_at(schema, sections, location)
    return list(model.model_fields) if model is not None else []


def _nested_home(schema: type[BaseModel], sections: Mapping[str, type[BaseModel]], location: tuple[Any, ...], key: str) -> str | None:
    """``section.key`` when ``key`` is not a field where it was written but is one of a section
    just below (``epochs`` at the top of an experiment: ``training.epochs``)."""
    model = _model_at(schema, sections, location)
    for name in model.model_fields if model is not None else ():
        child = _child(model, sections, not location, name)
        if child is not None and key in child.model_fields:
            return f"{name}.{key}"
    return None


def _suggestion(key: str, allowed: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the allowed key closest to ``key``, else `` (allowed: ...)``
    (cut to about 150 characters); empty when nothing is known.

    >>> _suggestion("epoch", ["epochs", "steps"]), _suggestion("zzz", ["epochs", "steps"])
    (" (did you mean 'epochs'?)", ' (allowed: epochs, steps)')
    """
    hint = did_you_mean(key, allowed)
    if hint:
        return f" ({hint.strip()})"
    listed = ", ".join(allowed)
    return f" (allowed: {listed if len(listed) <= 150 else listed[:147] + '...'})" if allowed else ""


def unknown_path_hint(dotted: str, schema: type[BaseModel], sections: Mapping[str, type[BaseModel]]) -> str:
    """The suggestion (``_suggestion``) for the first part of the field path ``dotted`` that
    ``schema`` (with ``sections``, as ``format_validation_error`` takes them) does not have."""
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        allowed = _allowed_keys(schema, sections, tuple(parts[:depth]))
        if not allowed:
            return ""
        if part not in allowed:
            home = _nested_home(schema, sections, tuple(parts[:depth]), part)
            return f" (did you mean {'.'.join([*parts[:depth], home, *parts[depth + 1:]])!r}?)" if home else _suggestion(part, allowed)
    return ""
