"""Reading option values written in YAML (``--config`` files and ``KEY VALUE`` options) the way a user means them.

* ``1e-5`` is a number. PyYAML follows YAML 1.1, where a float needs a dot (``1.0e-5``), so the learning
  rate most papers print would arrive as the string ``'1e-5'`` and fail deep inside the trainer.
* A value is checked against the option's type before anything runs: a number where a number is expected
  (an int is a fine float; ``true`` is no number), one of a choice's values, text for text and paths.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

_FLOAT = re.compile(r"^[-+]?(?:\d[\d_]*)?(?:\.\d*)?[eE][-+]?\d+$")


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads exponent floats without a dot (``1e-5``, ``3E4``), as YAML 1.2 does."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def load(text: str) -> Any:
    """``text`` as YAML (safe), with ``1e-5`` read as a float."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def option_values(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """KEY VALUE options (``--trainer``, ``--env-kwargs``, ``--judge-options``) with values read as YAML scalars
    (``1e-5`` is a number)."""
    return {key: load(value) if isinstance(value, str) else value for key, value in pairs.items()}


def coerce_fields(values: Mapping[str, Any], cls: type) -> dict[str, Any]:
    """``values`` as the dataclass ``cls`` types its fields (:func:`coerce`); names it lacks pass through."""
    hints = typing.get_type_hints(cls)
    return {name: coerce(name, v, hints[name]) if name in hints else v for name, v in values.items()}


def coerce(name: str, value: Any, annotation: Any) -> Any:
    """``value`` as option ``name`` of type ``annotation`` wants it; ``ValueError`` saying what was expected.

    Handles ``None`` unions, bool, int, float, str, Path, Literal, tuples of those and mappings (whose values pass
    through); other types pass through.
    """
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return coerce(name, value, inner[0])
        return value
    if typing.get_origin(annotation) is Literal:
        if value not in args:
            raise ValueError(f"{name} must be one of {', '.join(map(str, args))}, not {value!r}")
        return value
    if typing.get_origin(annotation) is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{name} must be a list such as [1, 2], not {value!r}")
        item = args[0] if args else Any
        return tuple(coerce(f"{name}[{i}]", v, item) for i, v in enumerate(value))
    if typing.get_origin(annotation) is dict and not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping such as {{key: value}}, not {value!r}")
    expected = {bool: "true or false", int: "a whole number", float: "a number", str: "text", Path: "a path"}
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        Path: isinstance(value, str | Path),
    }
    if annotation not in ok:
        return value
    if not ok[annotation]:
        raise ValueError(f"{name} must be {expected[annotation]}, not {value!r}")
    return annotation(value)
