"""The OpenAPI description of ``claw-serve``'s request and answers, as pydantic models: what ``/openapi.json``
publishes for clients and for the schemathesis fuzz in the tests. Documentation only — requests are parsed by
:func:`~claw_train.serve.schema.parse_request`, whose rules these mirror (the last message must also be the user's or
a tool's, which a schema cannot say)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from claw_train.serve.schema import MAX_ID_CHARS, MAX_SEED, MAX_STOPS, MIN_TOP_P


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextPart(_Open):
    """A text part of a message's content list."""

    type: Literal["text"]
    text: str


class FunctionCall(_Open):
    """The function an assistant's tool call names, with its arguments."""

    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(_Open):
    """One tool call of an assistant message."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class _Said(_Open):
    content: str | list[TextPart]
    name: str | None = None


class SystemMessage(_Said):
    """A system (or developer) message."""

    role: Literal["system", "developer"]


class UserMessage(_Said):
    """A user message."""

    role: Literal["user"]


class AssistantMessage(_Open):
    """An earlier assistant reply: text, tool calls or both."""

    role: Literal["assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(_Said):
    """A tool's result."""

    role: Literal["tool"]
    tool_call_id: str | None = None


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
"""A chat message (the last one must be the user's or a tool's)."""


class FunctionDef(_Open):
    """A function the model may call: name, description, JSON-schema parameters."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    """One entry of the request's ``tools``."""

    type: Literal["function"] = "function"
    function: FunctionDef


class StreamOptions(_Open):
    """Streaming options (``include_usage``)."""

    include_usage: bool | None = None


Temperature = Literal[0] | Annotated[float, Field(ge=MIN_TOP_P, le=2)]


class ChatCompletionBody(_Open):
    """``POST /v1/chat/completions``: the OpenAI request (fields not listed here are accepted and ignored)."""

    messages: list[Message] = Field(min_length=1, examples=[[{"role": "user", "content": "Hi"}]])
    model: str | None = Field(None, max_length=MAX_ID_CHARS)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: Temperature | None = None
    top_p: float | None = Field(None, ge=MIN_TOP_P, le=1)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOPS)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1)
    tools: list[Tool] | None = None
    user: str | None = Field(None, max_length=MAX_ID_CHARS)


class ErrorDetail(BaseModel):
    """What went wrong, and the parameter to blame where there is one."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer."""

    error: ErrorDetail


class ReplyMessage(_Open):
    """The assistant's reply in a choice."""

    role: Literal["assistant"]
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


class Choice(_Open):
    """The one choice of a completion, with why generation stopped."""

    index: int
    message: ReplyMessage
    finish_reason: Literal["stop", "length", "tool_calls"]


class Usage(_Open):
    """Token counts of the request and its reply."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(_Open):
    """The ``chat.completion`` answer (``stream: true``: ``chat.completion.chunk`` server-sent events instead)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage
