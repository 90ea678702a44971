"""The HTTP side of ``claw-serve``: FastAPI routes over :class:`~claw_train.serve.sessions.LiveSessions`, the
listening socket and the bind rules (:mod:`~claw_train.serve.server` runs them with the pipeline).

Routes: ``POST /v1/chat/completions`` (JSON, or server-sent events streamed token by token), ``GET /v1/models``,
``GET /healthz``, ``GET /metrics``; ``GET /openapi.json`` describes them. Errors are OpenAI-style
``{"error": {...}}`` JSON: 400 for bad input, 401 without the API key, 403 for a request from elsewhere to a keyless
server, 413 for a body over ``--max-body-bytes``, 415 for a body not declared ``application/json``, 429 when a new
session finds ``--max-sessions`` sessions all mid-request, 503 when the policy fails or does not answer within
``--request-timeout`` seconds, or while the server is shutting down. Every response carries ``X-Policy-Version``
(also in ``system_fingerprint`` as ``claw-v<N>``) and ``X-Session-Id``; a request naming another model is answered
by this one with an ``X-Claw-Warning`` header, and a trained turn that does not sample at the request's
``temperature``/``top_p`` says so in an ``X-Claw-Sampling`` header.

Security: with an API key (``--api-key`` or ``$CLAW_API_KEY``) every route but ``/healthz`` needs
``Authorization: Bearer <key>`` (compared in constant time); without one the server only listens on a loopback
address (:func:`check_bind`) and every route but ``/healthz`` answers only a ``Host`` that names this machine
literally, and an ``Origin``, if any, of this machine on this port (:func:`claw_train.access.stranger`; no DNS): a web
page elsewhere can neither read it through DNS rebinding nor post to it. Either way a POST body must be declared
``application/json`` (else 415, before it is read), so a cross-site form or ``text/plain`` request, which a browser
sends without a CORS preflight, is never served; no route grants CORS. A body is refused from its
``Content-Length``, or as soon as the bytes read pass the limit, before the rest is read; parsing, templates and
tokenising run in worker threads, so ``/healthz`` answers at once whatever the requests are doing.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from claw_train import access
from claw_train.options.tree import ServingConfig
from claw_train.pipeline.rundir import RunError
from claw_train.serve.openapi import ChatCompletion, ChatCompletionBody, ErrorBody
from claw_train.serve.schema import (
    MAX_ID_CHARS,
    SSE_DONE,
    TURN_TYPES,
    ApiError,
    ChatRequest,
    chat_response,
    parse_request,
    sse_chunk,
    sse_events,
)
from claw_train.serve.sessions import LiveSessions

API_KEY_ENV = access.API_KEY_ENV
DEFAULT_MAX_BODY = 4 << 20
DRAIN_LIMIT = 64 << 20
"""A refused body declared up to this size is read to its end and dropped; a larger one closes the connection."""


def api_key(serving: ServingConfig) -> str:
    """The key clients must send: ``--api-key``, else ``$CLAW_API_KEY``; empty: none."""
    return access.api_key(serving.api_key)


def check_bind(host: str, key: str) -> None:
    """Refuse to listen beyond this machine without an API key: whoever reaches the port could train the model."""
    if (message := access.refusal(host, key, exposes="use the model and train it")) is not None:
        raise RunError(message)


def _header_value(text: str) -> str:
    """``text`` as a header value: printable ASCII as it is, anything else percent-encoded."""
    return text if text.isascii() and text.isprintable() else urllib.parse.quote(text, safe="")


_ERRORS = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Malformed request (OpenAI error shape)"),
        (401, "Missing or wrong API key"),
        (403, "Without an API key: a Host or Origin that is not this machine's"),
        (413, "Request body over --max-body-bytes"),
        (415, "A request body not declared as application/json"),
        (429, "A new session while --max-sessions sessions are all mid-request"),
        (503, "The policy failed or timed out, or the server is stopping"),
    )
}


def create_app(sessions: LiveSessions, model: str, *, key: str = "", max_body: int = DEFAULT_MAX_BODY) -> Any:
    """The FastAPI app serving ``sessions`` under the model name ``model``; ``key``: the Bearer key every route but
    ``/healthz`` requires (empty: none); ``max_body``: the largest request body in bytes."""
    app = FastAPI(title="claw-serve", docs_url=None, redoc_url=None, openapi_url=None, version="1")
    stats = sessions.stats
    _add_error_handlers(app, stats)
    authorize = _authorizer(key.encode(), stats)
    read_body = _body_reader(max_body)
    schema = _describe(app, secret=bool(key))

    @app.post(
        "/v1/chat/completions",
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": _BODY_REF}}}}
        },
        responses={
            200: {
                "model": ChatCompletion,
                "content": {"text/event-stream": {"schema": _SSE_EVENT}},
                "description": "The completion (JSON), or with stream=true its chunks as server-sent events",
            },
            **_ERRORS,
        },
    )
    async def chat_completions(request: Request) -> Any:
        authorize(request)
        _require_json(request)
        raw = await read_body(request)
        req = await asyncio.to_thread(parse_request, raw)
        turn_type = (request.headers.get("x-turn-type") or "main").strip().lower()
        if turn_type not in TURN_TYPES:
            raise ApiError(400, f"X-Turn-Type must be main or side, not {turn_type!r}", param="X-Turn-Type")
        session_id = request.headers.get("x-session-id") or req.user
        if session_id is not None and len(session_id) > MAX_ID_CHARS:
            raise ApiError(400, f"X-Session-Id is longer than {MAX_ID_CHARS} characters", param="X-Session-Id")
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        headers = {}
        if session_id:
            headers["X-Session-Id"] = _header_value(session_id)
        if req.model and req.model != model:
            headers["X-Claw-Warning"] = _header_value(f"model {req.model!r} is not served here; answered by {model!r}")
        if refused := sessions.sampling_refused(req, session_id, turn_type):
            headers["X-Claw-Sampling"] = _header_value(refused)
        if req.stream:
            return await _stream(sessions, req, session_id, turn_type, model, rid, headers)
        completion, prompt_tokens = await sessions.chat(req, session_id, turn_type)
        body = await _reply(sessions, completion, prompt_tokens, req, model, rid)
        headers["X-Policy-Version"] = str(completion.policy_version)
        return JSONResponse(body, headers=headers)

    @app.get("/v1/models", responses={401: _ERRORS[401], 403: _ERRORS[403]})
    async def models(request: Request) -> dict[str, Any]:
        authorize(request)
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "claw"}]}

    @app.get("/healthz", responses={503: {"description": "The server is stopping"}})
    async def healthz() -> JSONResponse:
        up = not sessions.control.stopping
        body = {"status": "ok" if up else "stopping", "version": sessions.serving.version, "training": sessions.train}
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get("/metrics", responses={401: _ERRORS[401], 403: _ERRORS[403]})
    async def metrics(request: Request) -> JSONResponse:
        authorize(request)
        return JSONResponse(json.loads(json.dumps(sessions.metrics(), default=str)))

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_json(request: Request) -> JSONResponse:
        authorize(request)  # the description of the API is behind the same key as the API
        return JSONResponse(schema())

    return app


def _add_error_handlers(app: FastAPI, stats: Any) -> None:
    """Every error as OpenAI's error JSON, counted in ``stats``."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        stats.add("errors_5xx" if err.status >= 500 else "errors_4xx")
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return await api_error(request, ApiError(err.status_code, str(err.detail), headers=err.headers))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return await api_error(request, ApiError(400, str(err.errors())[:500]))

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> JSONResponse:
        stats.add("errors_5xx")
        body = ApiError(500, f"internal error: {type(err).__name__}", kind="server_error").body()
        return JSONResponse(body, status_code=500)


def _authorizer(secret: bytes, stats: Any) -> Any:
    """The check every route but ``/healthz`` makes: the API key when there is one; without one, a request from this
    machine (:func:`claw_train.access.stranger`)."""

    def authorize(request: Request) -> None:
        if not secret:
            if (why := access.stranger(request.scope)) is not None:
                raise ApiError(403, f"claw-serve: {why}", code="not_loopback")
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"), secret):
            stats.add("unauthorized")
            raise ApiError(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return authorize


def _body_reader(max_body: int) -> Any:
    """How a request body is read, refused past ``max_body`` bytes."""

    async def read_body(request: Request) -> bytes:
        """The body, refused (413) from its declared length or as soon as the bytes read pass ``max_body``. The rest
        of a declared body up to :data:`DRAIN_LIMIT` is discarded unread (so the client, still sending, reads its
        413); past that, or chunked, the connection is closed instead."""
        declared = request.headers.get("content-length", "").strip()
        size = int(declared) if declared.isdigit() else None
        if size is not None and size > max_body:
            raise _too_big(max_body, close=size > DRAIN_LIMIT)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise _too_big(max_body, close=True)
            chunks.append(chunk)
        return b"".join(chunks)

    return read_body


def _describe(app: FastAPI, *, secret: bool) -> Any:
    """Make ``app``'s OpenAPI schema name the request model's sub-models, and the Bearer scheme when a key is set;
    returns the function that gives the schema."""
    openapi = app.openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = openapi()
            defs = ChatCompletionBody.model_json_schema(ref_template="#/components/schemas/{model}").get("$defs", {})
            components = doc.setdefault("components", {})
            components.setdefault("schemas", {}).update(defs)
            components["schemas"]["ChatCompletionBody"] = _ref(ChatCompletionBody)
            if secret:
                components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                for path, ops in doc["paths"].items():
                    for op in ops.values():
                        if path != "/healthz":
                            op["security"] = [{"bearer": []}]
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]
    return schema


def _require_json(request: Request) -> None:
    """Refuse (415) a body not declared ``application/json`` (any parameters): a browser sends a cross-site
    ``text/plain`` or form POST without asking the server first, a JSON one never."""
    given = request.headers.get("content-type", "")
    if given.partition(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415, f"Content-Type must be application/json, not {given[:100]!r}", code="unsupported_media_type"
        )


def _too_big(limit: int, *, close: bool) -> ApiError:
    return ApiError(
        413,
        f"the request body is over the {limit}-byte limit",
        code="request_too_large",
        headers={"Connection": "close"} if close else None,
    )


_BODY_REF = "#/components/schemas/ChatCompletionBody"
_SSE_EVENT = {  # one server-sent event: a chat.completion.chunk as JSON, an error object, or "[DONE]"
    "type": "object",
    "properties": {"data": {"type": "string"}},
    "required": ["data"],
}


def _ref(model: Any) -> dict[str, Any]:
    """``model``'s JSON schema with its sub-models referenced under ``#/components/schemas``."""
    out = model.model_json_schema(ref_template="#/components/schemas/{model}")
    out.pop("$defs", None)
    return out


async def _reply(
    sessions: LiveSessions, completion: Any, prompt_tokens: int, req: ChatRequest, model: str, rid: str
) -> dict[str, Any]:
    """The ``chat.completion`` body (tool calls read in a worker thread: the parser's work is the reply's size)."""
    parser = sessions.live.tool_calls

    def tool_calls(text: str, tools: Any) -> tuple[str | None, list[dict[str, Any]]]:
        try:
            return parser(text, tools)
        except Exception:  # tools with schemas the parser cannot use: the reply is its text
            return text, []

    return await asyncio.to_thread(
        chat_response, completion, prompt_tokens, req, model, rid, int(time.time()), tool_calls=tool_calls
    )


async def _stream(
    sessions: LiveSessions,
    req: ChatRequest,
    session_id: str | None,
    turn_type: str,
    model: str,
    rid: str,
    headers: dict[str, str],
) -> Any:
    """Answer with server-sent events, one per generated piece of text. The turn runs as its own task (a client
    that goes away does not cut it short); a failure before the first piece is a plain JSON error, one after it an
    ``error`` event. With ``tools`` the reply comes in one piece at the end, once its tool calls are parsed."""
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    version = sessions.serving.version
    turn = asyncio.ensure_future(
        sessions.chat(req, session_id, turn_type, on_text=None if req.tools else pieces.put_nowait)
    )
    turn.add_done_callback(lambda t: (pieces.put_nowait(None), t.cancelled() or t.exception()))
    first = await pieces.get()
    if first is None:
        completion, prompt_tokens = turn.result()  # an ApiError is the answer
        body = await _reply(sessions, completion, prompt_tokens, req, model, rid)
        headers["X-Policy-Version"] = str(completion.policy_version)
        return StreamingResponse(sse_events(body), media_type="text/event-stream", headers=headers)
    head = {"id": rid, "created": int(time.time()), "model": model, "system_fingerprint": f"claw-v{version}"}

    async def events() -> AsyncIterator[str]:
        yield sse_chunk(head, {"role": "assistant", "content": ""})
        piece = first
        while piece is not None:
            yield sse_chunk(head, {"content": piece})
            piece = await pieces.get()
        try:
            completion, prompt_tokens = turn.result()
        except Exception as err:  # the stream has begun: the error is its last event
            if not isinstance(err, ApiError):
                err = ApiError(500, f"internal error: {type(err).__name__}", kind="server_error")
            yield f"data: {json.dumps(err.body())}\n\n"
            return
        body = await _reply(sessions, completion, prompt_tokens, req, model, rid)
        choice = body["choices"][0]
        head["system_fingerprint"] = body["system_fingerprint"]
        yield sse_chunk(head, {}, choice["finish_reason"], usage=body["usage"])
        yield SSE_DONE

    headers["X-Policy-Version"] = str(version)
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def listen(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, so a port in use is a clear error (and port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise RunError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(128)
    return sock
