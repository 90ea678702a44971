"""Check tool-call arguments against the tool's JSON schema, and find characters no program can be handed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
_INVALID_CHAR = re.compile("[\0\ud800-\udfff]")


def validate_arguments(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Problems with ``args`` against a JSON schema (object/properties/required/additionalProperties/type)."""
    if not isinstance(args, dict):
        return [f"arguments must be a JSON object, got {_json_type(args)}"]
    problems = []
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in args:
            problems.append(f"missing required argument {name!r}")
    for name, value in args.items():
        if name not in props:
            if schema.get("additionalProperties", True) is False:
                problems.append(f"unexpected argument {name!r} (allowed: {', '.join(sorted(props)) or 'none'})")
            continue
        want = props[name].get("type")
        if want is not None and not _has_type(value, want):
            problems.append(f"argument {name!r} must be {want}, got {_json_type(value)}")
        elif isinstance(value, str) and (bad := invalid_char(value)) is not None:
            problems.append(f"argument {name!r} holds {bad}; write plain text")
    return problems


def invalid_char(text: str) -> str | None:
    """A description of the first character of ``text`` that no program can be handed (a NUL, or a lone
    UTF-16 surrogate such as a JSON ``\\ud800`` escape, which is not valid Unicode), else ``None``."""
    m = _INVALID_CHAR.search(text)
    if m is None:
        return None
    ch = m.group()
    what = "a NUL character" if ch == "\0" else "a lone UTF-16 surrogate, which is not valid Unicode"
    return f"{what} (U+{ord(ch):04X}) at character {m.start()}"


def _has_type(value: Any, want: str | list[str]) -> bool:
    wants = [want] if isinstance(want, str) else list(want)
    for w in wants:
        types = _JSON_TYPES.get(w)
        if types is None:
            return True
        if isinstance(value, bool) and w in ("integer", "number"):
            continue
        if isinstance(value, types):
            return True
    return False


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__
