"""``claw-serve``'s wiring: a :class:`~claw_train.pipeline.Pipeline` whose turn source is the server's
:class:`~claw_train.serve.sessions.LiveSessions`, behind uvicorn on the socket :func:`~claw_train.serve.app.listen`
bound (:func:`serve`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from claw_envs.spec import resolve
from claw_train.options.tree import ServeArgs
from claw_train.pipeline import Pipeline, PipelineResult, RunError, RunParts
from claw_train.serve.app import api_key, check_bind, create_app, listen
from claw_train.serve.sessions import LiveSessions


def serve_pipeline(args: ServeArgs, **pipeline_kwargs: Any) -> tuple[Pipeline, Callable[[], LiveSessions]]:
    """The pipeline of a server: live sessions as its turn source; returns it and a getter for the sessions."""
    if args.training.resume and not args.serving.train:
        raise RunError("--resume continues training; it needs --train (serve a checkpoint with --model PATH)")
    made: list[LiveSessions] = []

    def source(parts: RunParts) -> LiveSessions:
        if parts.spec.live is None:
            raise ValueError(f"the {parts.spec.name!r} family cannot be served live (its spec has no 'live')")
        made.append(
            LiveSessions(
                args.serving,
                policy=parts.policy.inner,
                live=resolve(parts.spec.live)(),
                control=parts.control,
                stats=parts.stats,
                log=parts.log,
                turns=parts.turns,
                sampling=parts.sampling,
                train=parts.train,
                snapshot=parts.snapshot,
            )
        )
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

    key = api_key(args.serving)
    check_bind(args.serving.host, key)
    if args.serving.max_body_bytes < 1:
        raise RunError(f"--max-body-bytes must be at least 1, got {args.serving.max_body_bytes}")
    if args.serving.max_sessions < 1:
        raise RunError(f"--max-sessions must be at least 1, got {args.serving.max_sessions}")
    sock = listen(args.serving.host, args.serving.port)
    pipeline, sessions = serve_pipeline(args, **pipeline_kwargs)
    run = asyncio.create_task(pipeline.run())
    started = asyncio.ensure_future(_ready(sessions))
    await asyncio.wait({run, started}, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():  # it could not start (bad model, output dir in use): said by run()
        started.cancel()
        sock.close()
        return await run
    model = args.serving.served_model or args.run.model
    config = uvicorn.Config(
        create_app(sessions(), model, key=key, max_body=args.serving.max_body_bytes),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
        access_log=False,
    )
    server = _Server(config)
    http = asyncio.create_task(server.serve(sockets=[sock]))
    closed = asyncio.ensure_future(pipeline.control.closed.wait())
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


async def _ready(sessions: Callable[[], LiveSessions]) -> None:
    """Wait until the pipeline has started its sessions source."""
    while True:
        with contextlib.suppress(IndexError):  # not built yet
            if sessions().ready.is_set():
                return
        await asyncio.sleep(0.02)
