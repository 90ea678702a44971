"""The HTTP side of ``claw-serve``: FastAPI routes over :class:`~claw_train.serve.sessions.LiveSessions`, and the
uvicorn/socket lifecycle (:func:`serve`).

Routes: ``POST /v1/chat/completions`` (JSON or SSE), ``GET /v1/models``, ``GET /healthz``, ``GET /metrics``.
Errors are OpenAI-style ``{"error": {...}}`` JSON: 400 for bad input, 503 when the policy fails or does not answer
within ``--request-timeout`` seconds, or while the server is shutting down. Every response carries
``X-Policy-Version`` (also in ``system_fingerprint`` as ``claw-v<N>``) and ``X-Session-Id``; a request naming
another model is answered by this one with an ``X-Claw-Warning`` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from claw_train.config import ServeArgs
from claw_train.pipeline import Pipeline, PipelineResult, RunError
from claw_train.serve.schema import TURN_TYPES, ApiError, chat_response, parse_request, sse_events
from claw_train.serve.sessions import LiveSessions


def create_app(sessions: LiveSessions, model: str) -> Any:
    """The FastAPI app serving ``sessions`` under the model name ``model``."""
    app = FastAPI(title="claw-serve", docs_url=None, redoc_url=None)
    stats = sessions.p.stats

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        stats.add("errors_5xx" if err.status >= 500 else "errors_4xx")
        return JSONResponse(err.body(), status_code=err.status)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req = parse_request(await request.body())
        turn_type = (request.headers.get("x-turn-type") or "main").strip().lower()
        if turn_type not in TURN_TYPES:
            raise ApiError(400, f"X-Turn-Type must be main or side, not {turn_type!r}", param="X-Turn-Type")
        session_id = request.headers.get("x-session-id") or req.user
        completion, prompt_tokens = await sessions.chat(req, session_id, turn_type)
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        body = chat_response(
            completion, prompt_tokens, req, model, rid, int(time.time()), tool_calls=sessions.live.tool_calls
        )
        headers = {"X-Policy-Version": str(completion.policy_version)}
        if session_id:
            headers["X-Session-Id"] = session_id
        if req.model and req.model != model:
            headers["X-Claw-Warning"] = f"model {req.model!r} is not served here; answered by {model!r}"
        if req.stream:
            return StreamingResponse(sse_events(body), media_type="text/event-stream", headers=headers)
        return JSONResponse(body, headers=headers)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "claw"}]}

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        up = not sessions.p.closed.is_set()
        body = {"status": "ok" if up else "stopping", "version": sessions.serving.version, "training": sessions.p.train}
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get("/metrics")
    async def metrics() -> JSONResponse:
        return JSONResponse(json.loads(json.dumps(sessions.metrics(), default=str)))

    return app


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


def serve_pipeline(args: ServeArgs, **pipeline_kwargs: Any) -> tuple[Pipeline, Callable[[], LiveSessions]]:
    """The pipeline of a server: live sessions as its turn source; returns it and a getter for the sessions."""
    if args.training.resume and not args.serving.train:
        raise RunError("--resume continues training; it needs --train (serve a checkpoint with --model PATH)")
    made: list[LiveSessions] = []

    def source(pipeline: Pipeline) -> LiveSessions:
        made.append(LiveSessions(pipeline, args.serving))
        return made[0]

    title = f"claw-serve · {args.training.method} · {args.run.model}"
    pipeline = Pipeline(args, source=source, train=args.serving.train, title=title, **pipeline_kwargs)
    return pipeline, lambda: made[0]


async def serve(
    args: ServeArgs,
    *,
    on_ready: Callable[[str, Pipeline], None] = lambda url, pipeline: None,
    **pipeline_kwargs: Any,
) -> PipelineResult:
    """Serve until stopped (Ctrl-C or SIGTERM, or ``pipeline.request_stop``); returns the pipeline's result.

    ``on_ready(url, pipeline)`` is called once the server accepts requests (``url`` ends in ``/v1``);
    ``pipeline_kwargs`` go to the :class:`~claw_train.pipeline.Pipeline` (``policy``, ``judge``, ``model_path``,
    ``on_message``).
    """
    import uvicorn

    class _Server(uvicorn.Server):
        def capture_signals(self) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()  # Ctrl-C and SIGTERM are the pipeline's: checkpoint, then stop serving

    sock = listen(args.serving.host, args.serving.port)
    pipeline, sessions = serve_pipeline(args, **pipeline_kwargs)
    run = asyncio.create_task(pipeline.run())
    started = asyncio.ensure_future(_ready(pipeline))
    await asyncio.wait({run, started}, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():  # it could not start (bad model, output dir in use): said by run()
        started.cancel()
        sock.close()
        return await run
    model = args.serving.served_model or args.run.model
    config = uvicorn.Config(
        create_app(sessions(), model),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
        access_log=False,
    )
    server = _Server(config)
    http = asyncio.create_task(server.serve(sockets=[sock]))
    closed = asyncio.ensure_future(pipeline.closed.wait())
    while not server.started and not http.done() and not closed.done():
        await asyncio.sleep(0.02)
    if server.started:
        host, port = sock.getsockname()[:2]
        on_ready(f"http://{'[' + host + ']' if ':' in host else host}:{port}/v1", pipeline)
    await asyncio.wait({run, http, closed}, return_when=asyncio.FIRST_COMPLETED)
    if http.done() and not closed.done():
        pipeline.request_stop("error", f"the HTTP server stopped: {http.exception() or 'no reason given'}")
    server.should_exit = True
    await asyncio.gather(http, return_exceptions=True)
    sock.close()
    return await run


async def _ready(pipeline: Pipeline) -> None:
    """Wait until the pipeline has started its sessions source."""
    while not isinstance(getattr(pipeline, "source", None), LiveSessions) or not pipeline.source.ready.is_set():
        await asyncio.sleep(0.02)
