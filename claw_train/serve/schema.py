"""The OpenAI chat-completions wire format, as pure functions: request validation (:func:`parse_request`), the
``chat.completion`` body (:func:`chat_response`), its server-sent-event stream (:func:`sse_events`) and the
OpenAI-style error (:class:`ApiError`). No I/O here: unit-tested without a server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from claw_train.policy.base import Completion

ROLES = ("system", "developer", "user", "assistant", "tool")
TURN_TYPES = ("main", "side")
ToolCallParser = Callable[[str, Sequence[Mapping[str, Any]]], tuple[str | None, list[dict[str, Any]]]]


class ApiError(Exception):
    """An error answered as OpenAI-style JSON."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}}


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
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    if "messages" not in body:
        raise ApiError(400, "'messages' is required", param="messages")
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "only n=1 is supported", param="n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise ApiError(400, f"max_tokens must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise ApiError(400, "top_p must be > 0", param="top_p")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise ApiError(400, "seed must be an integer", param="seed")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", param="stop")
    user = body.get("user")
    return ChatRequest(
        messages=_messages(body["messages"]),
        model=str(body.get("model") or ""),
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop=tuple(stop),
        tools=_tools(body.get("tools")),
        stream=bool(body.get("stream", False)),
        user=user if isinstance(user, str) and user else None,
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{key} must be a number in [{low}, {high}], got {value!r}", param=key)
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
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}, not {role!r}", param="messages")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _content(m, i)}
        for key in ("name", "tool_call_id", "tool_calls"):
            if m.get(key):
                msg[key] = m[key]
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
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if not raw:
        return None
    ok = isinstance(raw, list) and all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
        for t in raw
    )
    if not ok:
        raise ApiError(400, "tools must be a list of {'type': 'function', 'function': {'name': ...}}", param="tools")
    return [dict(t) for t in raw]


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


def sse_events(body: dict[str, Any]) -> AsyncIterator[str]:
    """A finished completion as an OpenAI ``chat.completion.chunk`` event stream."""
    choice = body["choices"][0]
    delta = {k: v for k, v in choice["message"].items() if v is not None}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}

    async def events() -> AsyncIterator[str]:
        yield f"data: {json.dumps(head | {'choices': [{'index': 0, 'delta': delta, 'finish_reason': None}]})}\n\n"
        last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        yield f"data: {json.dumps(head | {'choices': [last], 'usage': body['usage']})}\n\n"
        yield "data: [DONE]\n\n"

    return events()
