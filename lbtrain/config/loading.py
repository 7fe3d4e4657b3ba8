"""Reading configs: YAML files (strictly), ``extends`` chains, ``--set`` overrides."""

from __future__ import annotations

import functools
import logging
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from lbtrain.config.errors import ConfigError, format_validation_error, unknown_path_hint
from lbtrain.config.experiment import RUN_SECTION_SCHEMAS, ExperimentConfig, known_field_path
from lbtrain.config.limits import (
    MAX_CONFIG_BYTES,
    MAX_EXTENDS_DEPTH,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    check_grid_size,
    check_numbers,
    check_yaml_node,
    clip,
    quote,
)
from lbtrain.config.run import RunConfig, run_config_from_dict


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter where users get bitten: a key given twice in one mapping
    is an error (not "the later wins"), and ``1e-1`` is a float as users write it (YAML 1.2;
    YAML 1.1 wants ``1.0e-1`` and reads ``1e-1`` as a string); composing stops at
    ``MAX_YAML_NODES`` nodes."""

    def __init__(self, stream: str, where: str = "YAML"):
        super().__init__(stream)
        self.where, self.composed_nodes = where, 0

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        """PyYAML's, counting the nodes composed: more than ``MAX_YAML_NODES`` is a
        ``ConfigError`` while composing (a list of millions of items is refused in the time of
        its first hundred thousand, before any Python value is built; what aliases expand to is
        ``check_yaml_node``'s)."""
        self.composed_nodes += 1
        if self.composed_nodes > MAX_YAML_NODES:
            raise ConfigError(f"{self.where}: holds more than {MAX_YAML_NODES} values; an experiment is a few settings "
                              "and lists (split a study that large into experiments)")
        return super().compose_node(parent, index)


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789."),
)


def parse_yaml(text: str, where: str = "YAML") -> Any:
    """``text`` read by the strict loader (see ``_StrictLoader``), within the limits of
    ``lbtrain.config.limits`` (``where`` names the text in their one-line errors).

    >>> parse_yaml("lr: 1e-1")
    {'lr': 0.1}
    """
    loader = _StrictLoader(text, where)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_yaml_node(node, where)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def _read_config_bytes(path: Path) -> bytes:
    """The bytes of a config file that is a regular file of at most ``MAX_CONFIG_BYTES``, else a
    one-line ``ConfigError``: a FIFO would block the read and ``/dev/zero`` never end, so the kind
    is decided from ``stat`` before the file is opened, and no more than the limit is read (a file
    that grows meanwhile is still refused)."""
    status = path.stat()
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(status.st_mode):
        raise ConfigError(f"{path}: not a regular file (a FIFO, a device or a socket); an experiment is a YAML file")
    too_large = ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; an experiment is a few settings and lists")
    if status.st_size > MAX_CONFIG_BYTES:
        raise too_large
    with path.open("rb") as handle:
        content = handle.read(MAX_CONFIG_BYTES + 1)
    if len(content) > MAX_CONFIG_BYTES:
        raise too_large
    return content


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML file holds; anything else (no file, a folder, binary or non-UTF-8
    bytes, invalid YAML, a duplicate key, an empty file, a list) is a one-line ``ConfigError``."""
    path = Path(path)
    try:
        text = _read_config_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable (permission denied)") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); expected a YAML file") from None
    if "\x00" in text:
        raise ConfigError(f"{path}: a binary file, not YAML")
    try:
        data = parse_yaml(text, str(path))
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML ({clip(' '.join(str(error).split()))})") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; expected a mapping of config sections")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_run_config(path: str | Path) -> RunConfig:
    """Reads a resolved run config (YAML), as the runner writes into each run directory."""
    return run_config_from_dict(read_yaml_mapping(path))


logger = logging.getLogger(__name__)


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` over ``base``, recursing into mappings present in both. A ``null`` in
    ``update`` replaces what ``base`` has (the schema then gives a field that takes no None its
    default). An ``optimizer`` whose ``name`` the update changes keeps only the inherited
    ``params`` the new optimizer takes (``_params_the_new_optimizer_takes``).

    >>> deep_merge({"lr": {"base_lr": 0.1, "warmup_epochs": 5}, "seed": 0}, {"lr": {"base_lr": 0.2}, "seed": 1})
    {'lr': {'base_lr': 0.2, 'warmup_epochs': 5}, 'seed': 1}
    """
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
            if key == "optimizer":
                merged[key] = _params_the_new_optimizer_takes(base[key], value, merged[key])
        else:
            merged[key] = value
    return merged


def _params_the_new_optimizer_takes(base: dict[str, Any], update: dict[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    """``merged`` (an optimizer section) without the ``params`` it inherited from ``base`` that
    the optimizer ``update`` switches to does not take (a switch from momentum to LAMB drops
    ``momentum: 0.9``), saying which (INFO, once). Parameters the update gives itself stay, and
    are checked by the schema."""
    from lbtrain.config.run import OptimizerConfig

    default = OptimizerConfig.model_fields["name"].default
    old, new = base.get("name", default), merged.get("name", default)
    given = update.get("params") if isinstance(update.get("params"), dict) else {}
    inherited = [key for key in (base.get("params") or {}) if key not in given]
    if "name" not in update or old == new or not inherited or not isinstance(merged.get("params"), dict):
        return merged
    from lbtrain.optimizers import OPTIMIZERS
    from lbtrain.optimizers._arguments import accepted_arguments

    if new not in OPTIMIZERS:
        return merged  # the schema names the unknown optimizer
    accepted = accepted_arguments(OPTIMIZERS[new])
    dropped = tuple(key for key in inherited if key not in accepted)
    if dropped:
        _say_dropped(old, new, dropped)
    return {**merged, "params": {key: value for key, value in merged["params"].items() if key not in dropped}}


@functools.lru_cache(maxsize=64)
def _say_dropped(old: str, new: str, dropped: tuple[str, ...]) -> None:
    """Once per switch (a grid merges each variant once per world size and seed)."""
    logger.info("optimizer.name %s (was %s): dropped the inherited params it does not take: %s", new, old, ", ".join(dropped))


def nested(path: str, value: Any) -> dict[str, Any]:
    """The mapping that sets the dotted ``path`` to ``value``, one level per part.

    >>> nested("lr.decay.type", "cosine")
    {'lr': {'decay': {'type': 'cosine'}}}
    """
    result: Any = value
    for part in reversed(path.split(".")):
        result = {part: result}
    return result


def with_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``field.path: value`` of ``overrides`` merged in, in order: how a grid
    point, a sweep trial and ``--set`` change a base run."""
    for path, value in overrides.items():
        data = deep_merge(data, nested(path, value))
    return data


def _resolve_extends(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's mapping merged over the files it ``extends`` (each relative to the file's
    folder, else to the working directory), earlier ones first."""
    path = path.resolve()
    if path in chain:
        raise ConfigError(f"{path}: extends itself through {' -> '.join(p.name for p in chain)}")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ConfigError(f"{chain[0]}: its extends chain is more than {MAX_EXTENDS_DEPTH} files deep")
    data = read_yaml_mapping(path)
    extends = data.pop("extends", [])
    if isinstance(extends, str):
        extends = [extends]
    if not isinstance(extends, list) or not all(isinstance(item, str) for item in extends):
        raise ConfigError(f"{path}: extends must be a list of YAML paths, got {extends!r}")
    merged: dict[str, Any] = {}
    for item in extends:
        candidate = path.parent / item
        target = candidate if candidate.exists() else Path(item)
        merged = deep_merge(merged, _resolve_extends(target, (*chain, path)))
    return deep_merge(merged, data)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``path=value`` overrides (values parsed as YAML: ``3``, ``0.1``, ``[1, 2]``,
    ``linear``); a path that names no field is an error."""
    for override in overrides:
        path, separator, raw = override.partition("=")
        if not separator or not path:
            raise ConfigError(f"--set {override!r}: expected PATH=VALUE, e.g. lr.base_lr=0.2")
        if not known_field_path(path):
            raise ConfigError(f"--set {quote(path)[1:-1]}: no such field{unknown_path_hint(path, ExperimentConfig, RUN_SECTION_SCHEMAS)}")
        try:
            value = parse_yaml(raw, f"--set {path}")
        except yaml.YAMLError:
            raise ConfigError(f"--set {path}: value {quote(raw)} is not valid YAML") from None
        data = with_overrides(data, {path: value})
    return data


def load_experiment(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """Reads an experiment YAML: ``extends`` merged, ``--set`` overrides applied, validated.
    Grid points are validated by ``runner.expand``."""
    data = apply_overrides(_resolve_extends(Path(path)), list(overrides))
    data.setdefault("name", Path(path).stem)
    check_numbers(data)
    check_grid_size(data.get("grid"))
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, schema=ExperimentConfig, sections=RUN_SECTION_SCHEMAS)) from None
