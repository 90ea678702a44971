"""Read the tool calls out of a model's raw text (the parser every family with tools shares).

Two tool-call formats are understood:

* **Qwen/Hermes**: ``<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call>``, any number
  of blocks per turn, with prose around them.
* **OpenAI**: the action is a JSON assistant message ``{"content": ..., "tool_calls": [{"id": ...,
  "type": "function", "function": {"name": ..., "arguments": "<JSON string>"}}]}`` or just the
  ``tool_calls`` list.

Every problem becomes a :class:`ToolCallError` with a ``kind`` and a message meant for the model, never an
exception. A call whose name and arguments were read (even if the tool is unknown or the arguments are
wrong) keeps a ``call_id``, so it can be answered by a tool message; one that could not be read has none.

Model text is data, so every reader here is bounded (:class:`ParseLimits`): JSON nesting depth (checked
before ``json.loads``, which would otherwise recurse until ``RecursionError``), the size of the turn, the
number of tool calls in it, and the digits of a JSON number. An overflow is a ``ToolCallError`` like any
other (kinds ``too_deep``, ``too_large``, ``too_many_calls``), and every scan is linear in the text, so a
pathological turn costs milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.core import MAX_TEXT_LENGTH
from claw_envs.tool_calls.schema import validate_arguments

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

ErrorKind = Literal[
    "bad_json",
    "unclosed_tag",
    "unopened_tag",
    "bad_call",
    "unknown_tool",
    "bad_arguments",
    "wrong_type",
    "too_deep",
    "too_large",
    "too_many_calls",
]

MAX_JSON_DEPTH = 32
"""Deepest JSON nesting read in a tool call (a real call is 2–4 deep; CPython's ``json`` recurses ~1000)."""
MAX_ACTION_CHARS = MAX_TEXT_LENGTH
"""Longest turn read, in characters: the action space's own bound (2**20)."""
TURN_ERRORS = frozenset({"too_large", "too_many_calls"})
"""Error kinds about the whole turn rather than one call (nothing in such a turn is run)."""


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on what the parser reads; an overflow is the agent's error (a :class:`ToolCallError`).

    The defaults are far beyond anything a real model writes legitimately.
    """

    max_depth: int = MAX_JSON_DEPTH
    """Deepest nesting of JSON objects/arrays in one call (or one OpenAI message)."""
    max_chars: int | None = MAX_ACTION_CHARS
    """Longest turn, in characters (``None``: no limit)."""
    max_calls: int | None = None
    """Most tool calls in one turn (``None``: no limit); a turn with more is refused as a whole."""


DEFAULT_LIMITS = ParseLimits()


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
    format: Literal["hermes", "openai", "fenced", "none"] = "none"

    @property
    def calls(self) -> list[ToolCall]:
        """The calls that can be run, in order."""
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[ToolCallError]:
        """The calls that cannot be run, in order."""
        return [i for i in self.items if isinstance(i, ToolCallError)]

    @property
    def has_tool_calls(self) -> bool:
        """Whether the model tried to call a tool at all (well-formed or not)."""
        return bool(self.items)


def parse_action(
    action: str,
    tools: Mapping[str, Mapping[str, Any]],
    *,
    id_prefix: str = "call_",
    limits: ParseLimits = DEFAULT_LIMITS,
) -> ParsedTurn:
    """Parse a raw assistant turn against ``tools`` (tool name → JSON schema of its arguments).

    OpenAI JSON is tried first (only when the whole action is a JSON object or list that looks like
    one); everything else is read as Hermes text. Ids are ``f"{id_prefix}{i}"`` unless the call has one.
    A turn over ``limits`` is one turn-level error (:data:`TURN_ERRORS`) and nothing else.
    """
    if limits.max_chars is not None and len(action) > limits.max_chars:
        return _refused(
            "too_large",
            f"the turn is {len(action):,} characters long and the limit is {limits.max_chars:,}: write a shorter "
            "turn (put long data in a file with several smaller calls)",
            action,
        )
    stripped = action.strip()
    if stripped[:1] in "{[" and stripped:
        data, problem = load_json(stripped, limits.max_depth)
        if problem is not None and problem[0] == "too_deep" and '"tool_calls"' in stripped:
            return _refused("too_deep", f"the tool-call message cannot be read: {problem[1]}", stripped)
        if _looks_openai(data):
            return parse_openai_message(data, tools, id_prefix=id_prefix, limits=limits)
    return parse_hermes(action, tools, id_prefix=id_prefix, limits=limits)


def parse_hermes(
    text: str,
    tools: Mapping[str, Mapping[str, Any]],
    *,
    id_prefix: str = "call_",
    limits: ParseLimits = DEFAULT_LIMITS,
) -> ParsedTurn:
    """Every ``<tool_call>…</tool_call>`` block of ``text``, validated against ``tools``."""
    if limits.max_calls is not None:
        found = max(text.count(OPEN_TAG), text.count(CLOSE_TAG))  # a stray tag is a (broken) call too
        if found > limits.max_calls:
            return _too_many(found, limits.max_calls, text)
    items: list[ToolCall | ToolCallError] = []
    prose: list[str] = []
    pos = 0
    find = _Finder(text)
    while True:
        start = find(OPEN_TAG, pos)
        stray = find(CLOSE_TAG, pos)
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
        end = find(CLOSE_TAG, body_start)
        nested = find(OPEN_TAG, body_start)
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
        item = _read_hermes_body(text[body_start:end], tools, f"{id_prefix}{len(items)}", limits.max_depth)
        items.append(dataclasses.replace(item, span=(start, end + len(CLOSE_TAG))))
        pos = end + len(CLOSE_TAG)
    return ParsedTurn(text=_join_prose(prose), items=tuple(items), format="hermes" if items else "none")


def parse_openai_message(
    message: Mapping[str, Any] | Sequence[Any],
    tools: Mapping[str, Mapping[str, Any]],
    *,
    id_prefix: str = "call_",
    limits: ParseLimits = DEFAULT_LIMITS,
) -> ParsedTurn:
    """An OpenAI assistant message (or its bare ``tool_calls`` list), validated against ``tools``.

    ``message`` is data already read (its depth is the caller's business: :func:`parse_action` bounds it);
    ``arguments`` strings inside it are read here within ``limits.max_depth``.
    """
    if isinstance(message, Mapping):
        content = message.get("content") or ""
        raw_calls = message.get("tool_calls") or []
    else:
        content, raw_calls = "", message
    text = content if isinstance(content, str) else _short(content, MAX_ACTION_CHARS)
    if limits.max_calls is not None and isinstance(raw_calls, list) and len(raw_calls) > limits.max_calls:
        return dataclasses.replace(_too_many(len(raw_calls), limits.max_calls, raw_calls), text=text)
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
            args, problem = load_json(args, limits.max_depth) if args.strip() else ({}, None)
            if problem is not None:
                kind, detail = problem
                items.append(
                    ToolCallError(
                        kind,
                        f"the arguments of {fn['name']!r} are not valid JSON: {detail}"
                        if kind == "bad_json"
                        else f"the arguments of {fn['name']!r}: {detail}",
                        raw=_short(fn.get("arguments")),
                        call_id=call_id,
                        name=fn["name"],
                        arguments=fn.get("arguments"),
                    )
                )
                continue
        items.append(_checked_call(call_id, fn["name"], args, tools, raw=_short(entry)))
    return ParsedTurn(text=text, items=tuple(items), format="openai")


def load_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, tuple[ErrorKind, str] | None]:
    """``json.loads(text)`` that never raises: ``(value, None)`` or ``(None, (kind, what is wrong))``.

    Nesting deeper than ``max_depth`` is refused before parsing (``too_deep``); a number with more digits than
    Python converts (4300 by default) is ``bad_json`` like any other syntax error.
    """
    depth = json_depth(text, max_depth)
    if depth > max_depth:
        return None, (
            "too_deep",
            f"the JSON is nested more than {max_depth} levels deep (objects and arrays inside each other); "
            "a tool call needs 2 or 3",
        )
    try:
        return json.loads(text), None
    except json.JSONDecodeError as err:
        return None, ("bad_json", f"{err.msg} at line {err.lineno} column {err.colno}")
    except (ValueError, RecursionError) as err:  # a number too long to convert; the depth check should stop the rest
        return None, ("bad_json", _short(str(err), 200))


def json_depth(text: str, stop_above: int | None = None) -> int:
    """How deeply JSON-like ``text`` nests ``{}``/``[]`` outside strings; stops counting above ``stop_above``.

    Linear in ``text``; text that is not JSON gets a rough answer, which is enough to bound the parser.
    """
    if text.count("{") + text.count("[") <= (stop_above or 0):
        return text.count("{") + text.count("[")
    depth = deepest = 0
    for m in _JSON_TOKEN.finditer(text):
        ch = m.group()
        if ch in "{[":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif ch in "}]":
            depth = max(0, depth - 1)
    return deepest


def strip_tool_calls(text: str) -> str:
    """``text`` without its ``<tool_call>`` blocks (for looking at what the model said around them)."""
    return parse_hermes(text, {}, limits=ParseLimits(max_chars=None)).text


# -- helpers -----------------------------------------------------------------------------------


_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[{}\[\]]', re.S)


class _Finder:
    """``text.find(tag, pos)`` remembered per tag, so a scan that only moves forward stays linear."""

    def __init__(self, text: str):
        self.text = text
        self.cache: dict[str, tuple[int, int]] = {}

    def __call__(self, tag: str, pos: int) -> int:
        hit = self.cache.get(tag)
        if hit is not None:
            since, found = hit
            if since <= pos and (found == -1 or found >= pos):
                return found
        found = self.text.find(tag, pos)
        self.cache[tag] = (pos, found)
        return found


def _refused(kind: ErrorKind, message: str, raw: Any) -> ParsedTurn:
    return ParsedTurn(text="", items=(ToolCallError(kind, message, raw=_short(raw)),), format="none")


def _too_many(found: int, limit: int, raw: Any) -> ParsedTurn:
    return _refused(
        "too_many_calls",
        f"the turn holds {found} tool calls and at most {limit} are allowed per turn, so none was run: make only "
        "the calls you need (one program can compute several things)",
        raw,
    )


def _looks_openai(data: Any) -> bool:
    if isinstance(data, dict):
        return "tool_calls" in data
    return isinstance(data, list) and bool(data) and all(isinstance(e, dict) and "function" in e for e in data)


def _read_hermes_body(
    body: str, tools: Mapping[str, Mapping[str, Any]], call_id: str, max_depth: int = MAX_JSON_DEPTH
) -> ToolCall | ToolCallError:
    raw = body.strip()
    data, problem = load_json(raw, max_depth)
    if problem is not None:
        kind, detail = problem
        if kind != "bad_json":
            return ToolCallError(kind, f"the tool call cannot be read: {detail}", raw=_short(raw))
        return ToolCallError(
            "bad_json",
            f"the tool call is not valid JSON: {detail}"
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
        args, problem = load_json(args, max_depth) if args.strip() else ({}, None)
        if problem is not None:
            kind, detail = problem
            return ToolCallError(
                kind,
                f'"arguments" of {data["name"]!r} is a string that is not a JSON object; pass an object'
                if kind == "bad_json"
                else f'"arguments" of {data["name"]!r}: {detail}',
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


def _join_prose(parts: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "".join(parts)).strip()


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
