"""The OpenAI chat-completions wire format, as pure functions: request validation (:func:`parse_request`), the
``chat.completion`` body (:func:`chat_response`), its server-sent-event stream (:func:`sse_events`,
:func:`sse_chunk`) and the OpenAI-style error (:class:`ApiError`). No I/O here: unit-tested without a server.

:func:`parse_request` is authoritative: every malformed body is an :class:`ApiError` 400 naming the parameter —
JSON nested deeper than :data:`MAX_DEPTH`, a lone surrogate anywhere, ``NaN``, a sampling parameter out of its
range, a string where a boolean belongs. The pydantic models of :mod:`~claw_train.serve.openapi` only describe the
same rules for the OpenAPI schema (clients, and the schemathesis fuzz in the tests); they never parse a request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from claw_train.policy.base import Completion

ROLES = ("system", "developer", "user", "assistant", "tool")
TURN_TYPES = ("main", "side")
MAX_DEPTH = 64
"""Deepest JSON nesting a request body may have (objects and arrays)."""
MIN_TOP_P = 1e-6
"""Smallest ``top_p`` (and non-zero ``temperature``) accepted: tinier ones overflow the sampler."""
MAX_SEED = 2**63 - 1
MAX_STOPS = 16
MAX_ID_CHARS = 256
"""Longest ``model`` name and session id (``user``, ``X-Session-Id``)."""
ToolCallParser = Callable[[str, Sequence[Mapping[str, Any]]], tuple[str | None, list[dict[str, Any]]]]


class ApiError(Exception):
    """An error answered as OpenAI-style JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The OpenAI-style JSON error body."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A validated ``/v1/chat/completions`` body."""

    messages: list[dict[str, Any]]
    model: str
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]
    tools: list[dict[str, Any]] | None
    stream: bool
    user: str | None


def parse_request(raw: bytes) -> ChatRequest:
    """Validate a request body (raises :class:`ApiError` 400 with the offending parameter)."""
    body = load_json(raw)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if "messages" not in body:
        raise ApiError(400, "'messages' is required", param="messages")
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise ApiError(400, "only n=1 is supported", param="n")
    max_tokens = None
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None and (not _is_int(value) or value < 1):
            raise ApiError(400, f"{key} must be an integer >= 1, got {_show(value)}", param=key)
        max_tokens = value if max_tokens is None else max_tokens
    temperature = _number(body, "temperature", 0.0, 2.0)
    if temperature is not None and 0 < temperature < MIN_TOP_P:
        raise ApiError(400, f"temperature must be 0 (greedy) or at least {MIN_TOP_P:g}", param="temperature")
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p is not None and top_p < MIN_TOP_P:
        raise ApiError(400, f"top_p must be in [{MIN_TOP_P:g}, 1], got {top_p!r}", param="top_p")
    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not 0 <= seed <= MAX_SEED):
        raise ApiError(400, f"seed must be an integer in [0, 2**63 - 1], got {_show(seed)}", param="seed")
    stop = body.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", param="stop")
    if len(stop) > MAX_STOPS:
        raise ApiError(400, f"stop may hold at most {MAX_STOPS} strings, got {len(stop)}", param="stop")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    _flag(options or {}, "include_usage", "stream_options.include_usage")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or len(model) > MAX_ID_CHARS):
        raise ApiError(400, f"model must be a string of at most {MAX_ID_CHARS} characters", param="model")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_ID_CHARS):
        raise ApiError(400, f"user must be a string of at most {MAX_ID_CHARS} characters", param="user")
    return ChatRequest(
        messages=_messages(body["messages"]),
        model=model or "",
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop=tuple(s for s in stop if s),
        tools=_tools(body.get("tools")),
        stream=stream,
        user=user or None,
    )


def load_json(raw: bytes) -> Any:
    """Parse a body as strict JSON (no ``NaN``/``Infinity``), at most :data:`MAX_DEPTH` deep, no lone surrogates."""
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise ApiError(400, f"the request body is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {str(err)[:200]}") from None
    _check_tree(value)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_tree(value: Any) -> None:
    """Depth and text checks over a parsed body, without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise ApiError(400, f"the request body is nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
                children = item.values()
            else:
                children = item
            stack.extend((child, depth + 1) for child in children if isinstance(child, str | dict | list))


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "the request body holds a lone surrogate (\\ud800-\\udfff): not valid Unicode") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _flag(body: Mapping[str, Any], key: str, name: str | None = None) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise ApiError(400, f"{name or key} must be true or false, got {_show(value)}", param=name or key)
    return bool(value)


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{key} must be a number in [{low}, {high}], got {_show(value)}", param=key)
    return float(value)


def _messages(raw: Any) -> list[dict[str, Any]]:
    """Chat messages in the one form the transcripts compare (text parts joined, ``developer`` as ``system``)."""
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}] must be an object", param="messages")
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(
                400, f"messages[{i}].role must be one of {', '.join(ROLES)}, not {_show(role)}", param="messages"
            )
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _content(m, i)}
        for key in ("name", "tool_call_id"):
            value = m.get(key)
            if value is not None and not isinstance(value, str):
                raise ApiError(400, f"messages[{i}].{key} must be a string", param="messages")
            if value:
                msg[key] = value
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise ApiError(400, f"messages[{i}].tool_calls belong to assistant messages", param="messages")
            if calls:
                msg["tool_calls"] = _tool_calls(calls, i)
        out.append(msg)
    if out[-1]["role"] not in ("user", "tool"):
        raise ApiError(400, "the last message must be from the user or a tool", param="messages")
    return out


def _content(m: Mapping[str, Any], i: int) -> str:
    content = m.get("content")
    if content is None:
        if m.get("role") == "assistant":
            return ""
        raise ApiError(400, f"messages[{i}].content is required", param="messages")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")


def _tool_calls(raw: Any, i: int) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``: ``[{"id", "type": "function", "function": {"name", "arguments"}}]``."""
    shape = "a list of {'id': ..., 'type': 'function', 'function': {'name': ..., 'arguments': ...}}"
    if not isinstance(raw, list):
        raise ApiError(400, f"messages[{i}].tool_calls must be {shape}", param="messages")
    out = []
    for call in raw:
        fn = call.get("function") if isinstance(call, dict) else None
        ok = (
            isinstance(fn, dict)
            and isinstance(fn.get("name"), str)
            and isinstance(fn.get("arguments", ""), str | dict)
            and isinstance(call.get("id", ""), str | None)
            and call.get("type", "function") == "function"
        )
        if not ok:
            raise ApiError(400, f"messages[{i}].tool_calls must be {shape}", param="messages")
        arguments = fn.get("arguments", "")
        entry = {"type": "function", "function": {"name": fn["name"], "arguments": arguments}}
        out.append({"id": call["id"], **entry} if call.get("id") else entry)
    return out


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None or raw == []:
        return None
    ok = isinstance(raw, list) and all(
        isinstance(t, dict)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        and isinstance(t["function"].get("description", ""), str | None)
        and isinstance(t["function"].get("parameters", {}), dict | None)
        for t in raw
    )
    if not ok:
        raise ApiError(400, "tools must be a list of {'type': 'function', 'function': {'name': ...}}", param="tools")
    return [dict(t) for t in raw]


# -- responses ------------------------------------------------------------------------------------


def chat_response(
    completion: Completion,
    prompt_tokens: int,
    req: ChatRequest,
    model: str,
    rid: str,
    created: int,
    tool_calls: ToolCallParser | None = None,
) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` body; tool calls the policy wrote (read by ``tool_calls``, the served family's
    parser) come back as ``tool_calls``."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    finish = completion.finish_reason if completion.finish_reason in ("stop", "length") else "stop"
    if req.tools and tool_calls is not None:
        content, calls = tool_calls(completion.text, req.tools)
        if calls:
            message = {"role": "assistant", "content": content, "tool_calls": calls}
            finish = "tool_calls"
    n = len(completion.token_ids)
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": f"claw-v{completion.policy_version}",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
    }


def sse_chunk(head: Mapping[str, Any], delta: Mapping[str, Any], finish: str | None = None, **extra: Any) -> str:
    """One ``chat.completion.chunk`` event; ``head`` holds ``id``, ``created``, ``model``, ``system_fingerprint``."""
    choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
    return f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [choice], **extra})}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def sse_events(body: dict[str, Any], *, role: bool = True) -> AsyncIterator[str]:
    """A finished completion as an OpenAI ``chat.completion.chunk`` event stream (``role``: open with the
    assistant's role; a stream that already sent it passes False)."""
    choice = body["choices"][0]
    delta = {k: v for k, v in choice["message"].items() if v is not None and (role or k != "role")}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}

    async def events() -> AsyncIterator[str]:
        if delta:
            yield sse_chunk(head, delta)
        yield sse_chunk(head, {}, choice["finish_reason"], usage=body["usage"])
        yield SSE_DONE

    return events()
