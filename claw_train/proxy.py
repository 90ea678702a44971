"""``claw-serve``: an OpenAI-compatible ``/v1/chat/completions`` server that learns from live conversations.

::

    client ──POST /v1/chat/completions──► ServePipeline ──generate (token-exact)──► policy
                 X-Session-Id, X-Turn-Type       │  the session's next main request = the last turn's next state
                                                 └──turns──► judge workers ──samples──► trainer ──weights──┘

It is :class:`~claw_train.pipeline.Pipeline` with HTTP clients in place of the env pool: the same
:class:`~claw_train.rollout.EpisodeAgent` keeps each session's token-exact transcript, the same
:class:`~claw_train.judging.SampleMaker` judges its turns and the same trainer thread learns from them,
publishing weights that the policy swaps in between requests. Serving never waits on judging or training.

* **Sessions.** ``X-Session-Id`` (else the request's ``user`` field) names a session. Without one a request is a
  one-off: served and logged, never trained. Main requests of one session are served one at a time, in
  arrival order (a second one waits for the first); side requests never wait.
* **Next states.** When a session's next main request repeats the history so far (assistant turns compared by
  role only, every other message exactly, same tools), its new user/tool messages are the previous turn's next
  state (evaluative/directive from :func:`~claw_envs.conversation.signals.extract_signals`) and the transcript
  continues with the generated tokens as they were. Any other history (edited, regenerated, a client that
  dropped a reply) closes the previous turn without a next state (logged, not trained) and starts a new
  transcript. So does ``session_timeout`` seconds of silence.
* **Side turns** (``X-Turn-Type: side``): served from the request's messages, logged, never trained.
* **Sampling.** Trained main turns sample at the trainer's temperature (the request's ``temperature`` and
  ``top_p`` are used only for side/one-off turns and with ``train=False``); ``max_tokens`` above the server's
  ``max_new_tokens`` is clamped to it; below 1 is a 400.
* **Model names.** There is one policy. A request naming another model is served by it, with an
  ``X-Claw-Warning`` header saying so.
* **Errors** are OpenAI-style ``{"error": {...}}`` JSON: 400 for bad input, 503 when the policy fails or does not
  answer within ``request_timeout`` seconds, or while the server is shutting down.

Every response carries ``X-Policy-Version`` (also in ``system_fingerprint`` as ``claw-v<N>``) and ``X-Session-Id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from claw_envs.conversation.env import summarize
from claw_envs.conversation.signals import extract_signals
from claw_envs.core import Evaluative, NextState
from claw_envs.toolcall.parse import parse_action
from claw_train.judging import turn_record
from claw_train.pipeline import Pipeline, PipelineConfig, PipelineResult, RunError
from claw_train.policy.base import Completion, PolicyError, SamplingParams
from claw_train.records import TurnRecord
from claw_train.rollout import EpisodeAgent, TokenTranscript

ROLES = ("system", "developer", "user", "assistant", "tool")
TURN_TYPES = ("main", "side")


@dataclass
class ServeConfig(PipelineConfig):
    """A :class:`PipelineConfig` for serving: the personal track (``conversation`` judges), no held-out evaluation,
    and the HTTP side's settings. ``max_new_tokens`` caps a request's ``max_tokens``."""

    updates: int = 1_000_000
    eval_every: int = 0
    max_new_tokens: int = 256
    max_staleness: int = 8  # a person may answer only after several updates; the clipped ratio corrects the gap
    host: str = "127.0.0.1"
    port: int = 8000
    train: bool = True
    session_timeout: float = 1800.0
    request_timeout: float = 120.0
    served_model: str = ""  # the name /v1/models lists (default: ``model``)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.session_timeout <= 0 or self.request_timeout <= 0:
            raise ValueError("session_timeout and request_timeout must be > 0")
        if self.resume and not self.train:
            raise ValueError("resume continues training; it needs train=True (serve a checkpoint with --model PATH)")
        self.served_model = self.served_model or self.model


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


@dataclass
class _Session:
    id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    agent: EpisodeAgent | None = None
    emitted: int = 0
    last_seen: float = field(default_factory=time.monotonic)


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


def continues(transcript: list[dict[str, Any]], messages: list[dict[str, Any]]) -> bool:
    """Whether ``messages`` repeat ``transcript`` (ending in our assistant turn) and only add user/tool messages."""
    if len(messages) <= len(transcript) or transcript[-1]["role"] != "assistant":
        return False
    for ours, theirs in zip(transcript, messages, strict=False):
        if ours["role"] != theirs["role"] or (ours["role"] != "assistant" and ours != theirs):
            return False
    return all(m["role"] in ("user", "tool") for m in messages[len(transcript) :])


def next_state(new: list[dict[str, Any]], before: list[dict[str, Any]], action: str, step: int) -> NextState:
    """The next state of a served turn: the messages the client sent after it (the user's reply, tool results)."""
    text = "\n\n".join(m["content"] for m in new)
    said = "\n\n".join(m["content"] for m in new if m["role"] == "user")
    signals = extract_signals(said) if said else None
    request = next((m["content"] for m in reversed(before) if m["role"] == "user"), "")
    return NextState(
        text=text,
        role="user" if said else "tool",
        step_index=step,
        evaluative=signals.evaluative if signals else Evaluative(),
        directive=signals.directive if signals else None,
        judge_inputs={"task": request, "history": summarize(before[:-1]), "action": action, "result": text},
    )


class ServePipeline(Pipeline):
    """The online pipeline fed by HTTP sessions instead of env rollouts (see the module docstring)."""

    cfg: ServeConfig

    def __init__(self, cfg: ServeConfig, **kwargs: Any):
        super().__init__(cfg, **kwargs)
        self.sessions: dict[str, _Session] = {}
        self.ready = asyncio.Event()

    # -- Pipeline hooks ---------------------------------------------------------------------

    def _make_gate(self) -> asyncio.Semaphore | None:
        return None  # clients set the pace; a full turn queue drops turns (counted) instead of blocking serving

    def _start_trainer(self, resume_from: Path | None, done: asyncio.Future) -> Any:
        if self.cfg.train:
            return super()._start_trainer(resume_from, done)
        waiter = asyncio.ensure_future(self._closed.wait())
        waiter.add_done_callback(lambda _: done.done() or done.set_result(("stopped", "stopped")))
        return None

    def _start_workers(self) -> list[asyncio.Task]:
        self.stats.status = "serving" if self.cfg.train else "serving (not training)"
        tasks = [asyncio.create_task(self._close_idle_sessions())]
        if self.cfg.train:
            tasks += [asyncio.create_task(self._judge_worker()) for _ in range(self.cfg.judge_workers)]
        self.ready.set()
        return tasks

    def _title(self) -> str:
        return f"claw-serve · {self.cfg.method} · {self.cfg.model}"

    # -- serving ----------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested (requests are refused from then on)."""
        return self._closed.is_set()

    async def wait_stopping(self) -> None:
        """Return once a stop is requested."""
        await self._closed.wait()

    @property
    def serving(self) -> Any:
        """The policy backend itself (serving does not retry: a failure is a 503 to the client)."""
        return self.policy.inner

    async def chat(self, req: ChatRequest, session_id: str | None, turn_type: str) -> tuple[Completion, int]:
        """Serve one request; returns the completion and its prompt length in tokens."""
        if self.stopping:
            raise ApiError(503, "the server is shutting down", kind="service_unavailable")
        await self._served.wait()
        self.stats.add("requests")
        if turn_type == "side" or session_id is None:
            kind = "side" if turn_type == "side" else "one_off"
            self.stats.add(f"{kind}_turns")
            return await self._one_off(req, session_id, kind)
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = _Session(session_id)
        async with session.lock:  # main turns of one session, one at a time
            session.last_seen = time.monotonic()
            try:
                return await self._main_turn(session, req)
            finally:
                session.last_seen = time.monotonic()

    def _sampling(self, req: ChatRequest, trained: bool) -> SamplingParams:
        cap = self.cfg.max_new_tokens
        tokens = min(req.max_tokens or cap, cap)
        if trained:
            return SamplingParams(max_new_tokens=tokens, temperature=self.cfg.temperature, seed=req.seed, stop=req.stop)
        return SamplingParams(
            max_new_tokens=tokens,
            temperature=self.cfg.temperature if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed,
            stop=req.stop,
        )

    async def _main_turn(self, session: _Session, req: ChatRequest) -> tuple[Completion, int]:
        agent = session.agent
        tools = req.tools
        if (
            agent is not None
            and agent.pending
            and agent.transcript is not None
            and agent.transcript.tools == tools
            and continues(agent.transcript.messages, req.messages)
        ):
            before = agent.transcript.messages
            ns = next_state(req.messages[len(before) :], before[:-1], before[-1]["content"], len(agent.turns) + 1)
            try:
                agent.observe(0.0, {"messages": req.messages, "next_state": ns})
            except PolicyError as err:
                self._end(session)
                raise ApiError(400, f"cannot render these messages with the model's chat template: {err}") from None
            self._flush(session)
        else:
            self._end(session)
            agent = EpisodeAgent(self.serving, self.sampling, group_id=session.id)
            try:
                agent.transcript = TokenTranscript(agent.tokenizer, req.messages, tools)
            except PolicyError as err:
                raise ApiError(400, f"cannot render these messages with the model's chat template: {err}") from None
            agent.task_id = session.id
            session.agent, session.emitted = agent, 0
        prompt_tokens = len(agent.transcript.ids)
        self._check_length(prompt_tokens)
        agent.sampling = self._sampling(req, trained=self.cfg.train)
        try:
            await self._generate(agent(None, {"messages": req.messages}))
        except ApiError:
            session.agent = None  # the transcript holds a turn the client never got: start afresh next time
            raise
        return agent.last, prompt_tokens

    async def _one_off(self, req: ChatRequest, session_id: str | None, kind: str) -> tuple[Completion, int]:
        from claw_train.policy.inprocess import render_prompt

        try:
            ids = render_prompt(self.serving.tokenizer, req.messages, tools=req.tools)
        except PolicyError as err:
            raise ApiError(400, f"cannot render these messages with the model's chat template: {err}") from None
        self._check_length(len(ids))
        completion = await self._generate(self.serving.generate(ids, self._sampling(req, trained=False)))
        self.log.write(
            completion.policy_version,
            {
                "kind": kind,
                "session": session_id,
                "version": completion.policy_version,
                "messages": req.messages,
                "action": completion.text,
                "tokens": len(completion.token_ids),
                "finish_reason": completion.finish_reason,
            },
        )
        return completion, len(ids)

    def _check_length(self, n: int) -> None:
        limit = getattr(self.serving, "max_positions", None)
        if limit is not None and n >= limit:
            raise ApiError(400, f"the prompt has {n} tokens; the model's context is {limit}", param="messages")

    async def _generate(self, call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, self.cfg.request_timeout)
        except TimeoutError:
            self.stats.add("policy_timeouts")
            raise ApiError(
                503, f"the policy did not answer within {self.cfg.request_timeout:g} s", kind="service_unavailable"
            ) from None
        except PolicyError as err:
            self.stats.add("policy_errors")
            raise ApiError(503, f"the policy failed: {err}", kind="service_unavailable") from None

    # -- turns to the judges ----------------------------------------------------------------

    def _flush(self, session: _Session) -> None:
        """Hand the session's finished turns on: to the judges, or (not training) to the logs only."""
        agent = session.agent
        if agent is None:
            return
        for turn in agent.turns[session.emitted :]:
            turn.info.setdefault("tools", agent.transcript.tools if agent.transcript else None)
            turn.info["session"] = session.id
            self._hand_over(turn)
        session.emitted = len(agent.turns)

    def _hand_over(self, turn: TurnRecord) -> None:
        if not self.cfg.train:
            self.log.write(turn.policy_version, turn_record(turn, None, None, "not_training", None))
            return
        self.stats.add("turns")
        try:
            self.turn_q.put_nowait(turn)
        except asyncio.QueueFull:  # the judges are behind: serving does not wait for them
            self.stats.mask("judge_backlog")
            self.log.write(turn.policy_version, turn_record(turn, None, None, "judge_backlog", None))

    def _end(self, session: _Session) -> None:
        """Close the session's last turn without a next state (it is logged, not trained)."""
        if session.agent is not None and session.agent.pending:
            session.agent.abandon("ok")
        self._flush(session)
        session.agent = None

    async def _close_idle_sessions(self) -> None:
        timeout = self.cfg.session_timeout
        while True:
            await asyncio.sleep(min(timeout / 2, 5.0))
            now = time.monotonic()
            for sid, session in list(self.sessions.items()):
                if now - session.last_seen >= timeout and not session.lock.locked():
                    self._end(session)
                    del self.sessions[sid]
                    self.stats.add("sessions_timed_out")

    def metrics(self) -> dict[str, Any]:
        """The pipeline's counters plus the server's (``/metrics``)."""
        snap = self.snapshot()
        snap["sessions"] = len(self.sessions)
        snap["training"] = self.cfg.train
        return snap


# -- HTTP ----------------------------------------------------------------------------------------


def chat_response(
    completion: Completion, prompt_tokens: int, req: ChatRequest, model: str, rid: str, created: int
) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` body; tool calls the policy wrote come back as ``tool_calls``."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    finish = completion.finish_reason if completion.finish_reason in ("stop", "length") else "stop"
    if req.tools:
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in req.tools}
        parsed = parse_action(completion.text, schemas)
        calls = [c for c in (item.to_openai() for item in parsed.items) if c is not None]
        if calls:
            message = {"role": "assistant", "content": parsed.text or None, "tool_calls": calls}
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


def _sse(body: dict[str, Any]) -> AsyncIterator[str]:
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


def create_app(pipeline: ServePipeline) -> Any:
    """The FastAPI app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /healthz``, ``GET /metrics``."""
    app = FastAPI(title="claw-serve", docs_url=None, redoc_url=None)
    model = pipeline.cfg.served_model

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        if err.status >= 500:
            pipeline.stats.add("errors_5xx")
        else:
            pipeline.stats.add("errors_4xx")
        return JSONResponse(err.body(), status_code=err.status)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req = parse_request(await request.body())
        turn_type = (request.headers.get("x-turn-type") or "main").strip().lower()
        if turn_type not in TURN_TYPES:
            raise ApiError(400, f"X-Turn-Type must be main or side, not {turn_type!r}", param="X-Turn-Type")
        session_id = request.headers.get("x-session-id") or req.user
        completion, prompt_tokens = await pipeline.chat(req, session_id, turn_type)
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        body = chat_response(completion, prompt_tokens, req, model, rid, int(time.time()))
        headers = {"X-Policy-Version": str(completion.policy_version)}
        if session_id:
            headers["X-Session-Id"] = session_id
        if req.model and req.model != model:
            headers["X-Claw-Warning"] = f"model {req.model!r} is not served here; answered by {model!r}"
        if req.stream:
            return StreamingResponse(_sse(body), media_type="text/event-stream", headers=headers)
        return JSONResponse(body, headers=headers)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "claw"}]}

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        up = not pipeline.stopping
        body = {
            "status": "ok" if up else "stopping",
            "version": pipeline.serving.version,
            "training": pipeline.cfg.train,
        }
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get("/metrics")
    async def metrics() -> JSONResponse:
        return JSONResponse(json.loads(json.dumps(pipeline.metrics(), default=str)))

    return app


def _listen(host: str, port: int) -> socket.socket:
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


async def serve(
    cfg: ServeConfig,
    *,
    on_ready: Callable[[str, ServePipeline], None] = lambda url, pipeline: None,
    **pipeline_kwargs: Any,
) -> PipelineResult:
    """Serve until stopped (Ctrl-C or SIGTERM, or ``pipeline.request_stop``); returns the pipeline's result.

    ``on_ready(url, pipeline)`` is called once the server accepts requests (``url`` ends in ``/v1``);
    ``pipeline_kwargs`` go to :class:`ServePipeline` (``policy``, ``judge``, ``model_path``, ``on_message``).
    """
    import uvicorn

    class _Server(uvicorn.Server):
        def capture_signals(self) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()  # Ctrl-C and SIGTERM are the pipeline's: checkpoint, then stop serving

    sock = _listen(cfg.host, cfg.port)
    pipeline = ServePipeline(cfg, **pipeline_kwargs)
    run = asyncio.create_task(pipeline.run())
    ready = asyncio.ensure_future(pipeline.ready.wait())
    await asyncio.wait({run, ready}, return_when=asyncio.FIRST_COMPLETED)
    if not pipeline.ready.is_set():  # it could not start (bad model, output dir in use): said by run()
        ready.cancel()
        sock.close()
        return await run
    config = uvicorn.Config(
        create_app(pipeline), log_level="warning", lifespan="off", timeout_graceful_shutdown=5, access_log=False
    )
    server = _Server(config)
    http = asyncio.create_task(server.serve(sockets=[sock]))
    closed = asyncio.ensure_future(pipeline.wait_stopping())
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
