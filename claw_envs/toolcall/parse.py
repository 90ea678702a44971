"""Read tool calls and final answers out of a model's raw text.

Two tool-call formats are understood:

* **Qwen/Hermes**: ``<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>``, any number
  of blocks per turn, with prose around them.
* **OpenAI**: the action is a JSON assistant message ``{"content": ..., "tool_calls": [{"id": ...,
  "type": "function", "function": {"name": ..., "arguments": "<JSON string>"}}]}`` or just the
  ``tool_calls`` list.

Every problem becomes a :class:`ToolCallError` with a ``kind`` and a message meant for the model, never an
exception. A call whose name and arguments were read (even if the tool is unknown or the arguments are
wrong) keeps a ``call_id``, so it can be answered by a tool message; one that could not be read has none.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

ErrorKind = Literal[
    "bad_json", "unclosed_tag", "unopened_tag", "bad_call", "unknown_tool", "bad_arguments", "wrong_type"
]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class ToolCall:
    """A call that can be run: a known tool with arguments that fit its schema."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str = ""
    span: tuple[int, int] | None = None

    def to_openai(self) -> dict[str, Any]:
        """The ``tool_calls`` entry of an OpenAI assistant message (arguments as a JSON string)."""
        args = json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass(frozen=True)
class ToolCallError:
    """A call that cannot be run. ``call_id``/``name`` are set when the call itself was readable."""

    kind: ErrorKind
    message: str
    raw: str = ""
    call_id: str | None = None
    name: str | None = None
    arguments: Any = None
    span: tuple[int, int] | None = None

    @property
    def answerable(self) -> bool:
        """Whether the call was readable enough to be answered by a tool message with its id."""
        return self.call_id is not None and self.name is not None

    def to_openai(self) -> dict[str, Any] | None:
        """A ``tool_calls`` entry when the call was readable enough to be answered by id, else ``None``."""
        if not self.answerable:
            return None
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn: its prose (tool-call blocks removed) and its calls, in the order written."""

    text: str
    items: tuple[ToolCall | ToolCallError, ...] = ()
    format: Literal["hermes", "openai", "none"] = "none"

    @property
    def calls(self) -> list[ToolCall]:
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[ToolCallError]:
        return [i for i in self.items if isinstance(i, ToolCallError)]

    @property
    def has_tool_calls(self) -> bool:
        """Whether the model tried to call a tool at all (well-formed or not)."""
        return bool(self.items)


def parse_action(action: str, tools: Mapping[str, Mapping[str, Any]], *, id_prefix: str = "call_") -> ParsedTurn:
    """Parse a raw assistant turn against ``tools`` (tool name → JSON schema of its arguments).

    OpenAI JSON is tried first (only when the whole action is a JSON object or list that looks like
    one); everything else is read as Hermes text. Ids are ``f"{id_prefix}{i}"`` unless the call has one.
    """
    stripped = action.strip()
    if stripped[:1] in "{[" and stripped:
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if _looks_openai(data):
            return parse_openai_message(data, tools, id_prefix=id_prefix)
    return parse_hermes(action, tools, id_prefix=id_prefix)


def parse_hermes(text: str, tools: Mapping[str, Mapping[str, Any]], *, id_prefix: str = "call_") -> ParsedTurn:
    """Every ``<tool_call>…</tool_call>`` block of ``text``, validated against ``tools``."""
    items: list[ToolCall | ToolCallError] = []
    prose: list[str] = []
    pos = 0
    while True:
        start = text.find(OPEN_TAG, pos)
        stray = text.find(CLOSE_TAG, pos)
        if stray != -1 and (start == -1 or stray < start):
            items.append(
                ToolCallError(
                    "unopened_tag",
                    f"found {CLOSE_TAG} without a matching {OPEN_TAG} before it",
                    raw=text[max(0, stray - 80) : stray + len(CLOSE_TAG)],
                )
            )
            prose.append(text[pos:stray])
            pos = stray + len(CLOSE_TAG)
            continue
        if start == -1:
            prose.append(text[pos:])
            break
        prose.append(text[pos:start])
        body_start = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, body_start)
        nested = text.find(OPEN_TAG, body_start)
        if end == -1 or (nested != -1 and nested < end):
            stop = len(text) if nested == -1 or end == -1 else nested
            items.append(
                ToolCallError(
                    "unclosed_tag",
                    f"a {OPEN_TAG} block is never closed: end each call with {CLOSE_TAG}",
                    raw=text[start:stop],
                )
            )
            pos = stop
            if end == -1 and nested == -1:
                break
            continue
        item = _read_hermes_body(text[body_start:end], tools, f"{id_prefix}{len(items)}")
        items.append(dataclasses.replace(item, span=(start, end + len(CLOSE_TAG))))
        pos = end + len(CLOSE_TAG)
    return ParsedTurn(text=_join_prose(prose), items=tuple(items), format="hermes" if items else "none")


def parse_openai_message(
    message: Mapping[str, Any] | Sequence[Any], tools: Mapping[str, Mapping[str, Any]], *, id_prefix: str = "call_"
) -> ParsedTurn:
    """An OpenAI assistant message (or its bare ``tool_calls`` list), validated against ``tools``."""
    if isinstance(message, Mapping):
        content = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
    else:
        content, raw_calls = "", message
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    items: list[ToolCall | ToolCallError] = []
    if not isinstance(raw_calls, list):
        items.append(ToolCallError("bad_call", '"tool_calls" must be a list of calls', raw=_short(raw_calls)))
    for i, entry in enumerate(raw_calls if isinstance(raw_calls, list) else []):
        call_id = entry.get("id") if isinstance(entry, dict) else None
        call_id = call_id if isinstance(call_id, str) and call_id else f"{id_prefix}{i}"
        fn = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            items.append(
                ToolCallError(
                    "bad_call",
                    'each tool call needs {"type": "function", "function": {"name": ..., "arguments": ...}}',
                    raw=_short(entry),
                )
            )
            continue
        args: Any = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as err:
                items.append(
                    ToolCallError(
                        "bad_json",
                        f"the arguments of {fn['name']!r} are not valid JSON: {err.msg} at line {err.lineno}"
                        f" column {err.colno}",
                        raw=_short(fn.get("arguments")),
                        call_id=call_id,
                        name=fn["name"],
                        arguments=fn.get("arguments"),
                    )
                )
                continue
        items.append(_checked_call(call_id, fn["name"], args, tools, raw=_short(entry)))
    return ParsedTurn(text=text, items=tuple(items), format="openai")


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
    return problems


def last_boxed(text: str) -> str | None:
    """Content of the last complete top-level ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Nested braces are matched (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``); escaped braces ``\\{``
    ``\\}`` do not count; a box inside a box belongs to the outer one; an unclosed box is skipped.
    """
    found = None
    pos = 0
    pattern = re.compile(r"\\(?:boxed|fbox)\s*\{")
    while (m := pattern.search(text, pos)) is not None:
        end = _matching_brace(text, m.end() - 1)
        if end is None:
            pos = m.end()
            continue
        found = text[m.end() : end].strip()
        pos = end + 1
    return found


def strip_tool_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks (for looking at what the model said around them)."""
    return parse_hermes(text, {}).text


# -- helpers -----------------------------------------------------------------------------------


def _looks_openai(data: Any) -> bool:
    if isinstance(data, dict):
        return "tool_calls" in data
    return isinstance(data, list) and bool(data) and all(isinstance(e, dict) and "function" in e for e in data)


def _read_hermes_body(body: str, tools: Mapping[str, Mapping[str, Any]], call_id: str) -> ToolCall | ToolCallError:
    raw = body.strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        return ToolCallError(
            "bad_json",
            f"the tool call is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
            ' (write {"name": ..., "arguments": {...}} with double-quoted strings and escaped newlines)',
            raw=_short(raw),
        )
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return ToolCallError(
            "bad_call",
            'a tool call must be a JSON object {"name": <tool name>, "arguments": {...}}',
            raw=_short(raw),
        )
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return ToolCallError(
                "bad_json",
                f'"arguments" of {data["name"]!r} is a string that is not a JSON object; pass an object',
                raw=_short(raw),
                call_id=call_id,
                name=data["name"],
                arguments=data.get("arguments"),
            )
    return _checked_call(call_id, data["name"], args, tools, raw=raw)


def _checked_call(
    call_id: str, name: str, args: Any, tools: Mapping[str, Mapping[str, Any]], raw: str
) -> ToolCall | ToolCallError:
    if name not in tools:
        known = ", ".join(sorted(tools)) or "none"
        return ToolCallError(
            "unknown_tool",
            f"there is no tool named {name!r}; available: {known}",
            raw=_short(raw),
            call_id=call_id,
            name=name,
            arguments=args,
        )
    problems = validate_arguments(tools[name], args)
    if problems:
        kind: ErrorKind = "wrong_type" if any(" must be " in p for p in problems) else "bad_arguments"
        return ToolCallError(
            kind,
            f"bad arguments for {name!r}: " + "; ".join(problems),
            raw=_short(raw),
            call_id=call_id,
            name=name,
            arguments=args,
        )
    return ToolCall(id=call_id, name=name, arguments=dict(args), raw=raw)


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


def _matching_brace(text: str, open_pos: int) -> int | None:
    depth = 0
    i = open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _join_prose(parts: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "".join(parts)).strip()


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
