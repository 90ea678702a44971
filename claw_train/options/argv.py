"""Reading a command line and a ``--config`` YAML file into the config tree (:mod:`claw_train.options.tree`):
:func:`parse` is how ``claw-train``, ``claw-eval`` and ``claw-serve`` read their options."""

from __future__ import annotations

import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tyro

from claw_train.options.tree import Args, ConfigError, get, options, replace, section_class, unknown_option


def load_yaml(path: Path, cls: type) -> dict[str, Any]:
    """The options in a ``--config`` YAML file, checked against ``cls``'s options and their types."""
    import yaml

    from claw_train.options import yaml_text

    try:
        data = yaml_text.load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--config {path}: cannot read it: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: must hold a mapping of options, not {type(data).__name__}")
    table = options(cls)
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name == "config" or name not in table:
            raise ConfigError(f"--config {path}: {unknown_option(name, table)}")
        section, f = table[name]
        hints = typing.get_type_hints(section_class(cls, section))
        try:
            values[name] = yaml_text.coerce(name, value, hints[f.name])
        except ValueError as err:
            raise ConfigError(f"--config {path}: {err}") from None
    return values


def parse(
    cls: type[Args], argv: Sequence[str] | None = None, *, prog: str | None = None, description: str | None = None
) -> Args:
    """Parse a command line (``sys.argv[1:]`` by default) into ``cls``; ``--config`` values fill in first.

    Exits with tyro's message on a malformed command line; raises :class:`ConfigError` for a bad YAML file or
    an option given in both places with different values.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    path = _config_path(argv)
    from_file = load_yaml(path, cls) if path is not None else {}
    default = replace(cls(), **from_file, config=path) if from_file or path else cls()
    args = tyro.cli(cls, args=argv, default=default, prog=prog, description=description)
    for name, value in from_file.items():
        given = get(args, name)
        if _normalised(given) != _normalised(value):
            raise ConfigError(
                f"--{name.replace('_', '-')} is {given!r} on the command line but {value!r} in {path}; give it once"
            )
    return args


def _config_path(argv: Sequence[str]) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return None


def _normalised(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return value
