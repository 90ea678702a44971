"""Live sessions, the turn source of ``claw-serve``: each HTTP conversation is an episode whose next main-line
request is the next state of the previous turn.

* **Sessions.** ``X-Session-Id`` (else the request's ``user`` field) names a session. Without one a request is a
  one-off: served and logged, never trained. Main requests of one session are served one at a time, in arrival
  order (a second one waits for the first); side requests never wait.
* **Next states.** When a session's next main request repeats the history so far (assistant turns compared by
  role only, every other message exactly, same tools), its new user/tool messages are the previous turn's next
  state (read by the served family's live adapter, ``FamilySpec.live``) and the transcript continues with the
  generated tokens as they were. Any other history (edited, regenerated, a client that dropped a reply) closes the
  previous turn without a next state (logged, not trained) and starts a new transcript. So does
  ``session_timeout`` seconds of silence.
* **Side turns** (``X-Turn-Type: side``): served from the request's messages, logged, never trained.
* **Sampling.** Trained main turns sample at the trainer's temperature (the request's ``temperature`` and ``top_p``
  are used only for side/one-off turns and with ``--no-train``); ``max_tokens`` above ``--max-new-tokens`` is
  clamped to it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from claw_envs.spec import resolve
from claw_train.judging import turn_record
from claw_train.policy.base import Completion, PolicyError, SamplingParams
from claw_train.records import TurnRecord
from claw_train.rollout import EpisodeAgent, TokenTranscript
from claw_train.serve.schema import ApiError, ChatRequest

if TYPE_CHECKING:
    from claw_train.config import ServingConfig
    from claw_train.pipeline import Pipeline


@dataclass
class Session:
    """One conversation: its lock (main turns one at a time) and its token-exact transcript."""

    id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    agent: EpisodeAgent | None = None
    emitted: int = 0
    last_seen: float = field(default_factory=time.monotonic)


def continues(transcript: list[dict[str, Any]], messages: list[dict[str, Any]]) -> bool:
    """Whether ``messages`` repeat ``transcript`` (ending in our assistant turn) and only add user/tool messages."""
    if len(messages) <= len(transcript) or transcript[-1]["role"] != "assistant":
        return False
    for ours, theirs in zip(transcript, messages, strict=False):
        if ours["role"] != theirs["role"] or (ours["role"] != "assistant" and ours != theirs):
            return False
    return all(m["role"] in ("user", "tool") for m in messages[len(transcript) :])


class LiveSessions:
    """The sessions of one server, feeding the pipeline's judges (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, serving: ServingConfig):
        self.p = pipeline
        self.cfg = serving
        if pipeline.spec.live is None:
            raise ValueError(f"the {pipeline.spec.name!r} family cannot be served live (its spec has no 'live')")
        self.live = resolve(pipeline.spec.live)()
        self.sessions: dict[str, Session] = {}
        self.ready = asyncio.Event()

    def start(self) -> list[asyncio.Task]:
        """The idle-session closer; marks the server ready."""
        self.p.stats.status = "serving" if self.p.train else "serving (not training)"
        self.ready.set()
        return [asyncio.create_task(self._close_idle())]

    @property
    def serving(self) -> Any:
        """The policy backend itself (serving does not retry: a failure is a 503 to the client)."""
        return self.p.policy.inner

    async def chat(self, req: ChatRequest, session_id: str | None, turn_type: str) -> tuple[Completion, int]:
        """Serve one request; returns the completion and its prompt length in tokens."""
        if self.p.closed.is_set():
            raise ApiError(503, "the server is shutting down", kind="service_unavailable")
        await self.p.served.wait()
        self.p.stats.add("requests")
        if turn_type == "side" or session_id is None:
            kind = "side" if turn_type == "side" else "one_off"
            self.p.stats.add(f"{kind}_turns")
            return await self._one_off(req, session_id, kind)
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = Session(session_id)
        async with session.lock:  # main turns of one session, one at a time
            session.last_seen = time.monotonic()
            try:
                return await self._main_turn(session, req)
            finally:
                session.last_seen = time.monotonic()

    def sampling(self, req: ChatRequest, trained: bool) -> SamplingParams:
        cap = self.p.rollout.max_new_tokens
        tokens = min(req.max_tokens or cap, cap)
        temperature = self.p.rollout.temperature
        if trained:
            return SamplingParams(max_new_tokens=tokens, temperature=temperature, seed=req.seed, stop=req.stop)
        return SamplingParams(
            max_new_tokens=tokens,
            temperature=temperature if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed,
            stop=req.stop,
        )

    async def _main_turn(self, session: Session, req: ChatRequest) -> tuple[Completion, int]:
        agent = session.agent
        if (
            agent is not None
            and agent.pending
            and agent.transcript is not None
            and agent.transcript.tools == req.tools
            and continues(agent.transcript.messages, req.messages)
        ):
            before = agent.transcript.messages
            new = req.messages[len(before) :]
            ns = self.live.next_state(new, before[:-1], before[-1]["content"], len(agent.turns) + 1)
            try:
                agent.observe(0.0, {"messages": req.messages, "next_state": ns})
            except PolicyError as err:
                self._end(session)
                raise ApiError(400, f"cannot render these messages with the model's chat template: {err}") from None
            self._flush(session)
        else:
            self._end(session)
            agent = EpisodeAgent(self.serving, self.p.sampling, group_id=session.id)
            try:
                agent.transcript = TokenTranscript(agent.tokenizer, req.messages, req.tools)
            except PolicyError as err:
                raise ApiError(400, f"cannot render these messages with the model's chat template: {err}") from None
            agent.task_id = session.id
            session.agent, session.emitted = agent, 0
        prompt_tokens = len(agent.transcript.ids)
        self._check_length(prompt_tokens)
        agent.sampling = self.sampling(req, trained=self.p.train)
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
        completion = await self._generate(self.serving.generate(ids, self.sampling(req, trained=False)))
        self.p.log.write(
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
        timeout = self.cfg.request_timeout
        try:
            return await asyncio.wait_for(call, timeout)
        except TimeoutError:
            self.p.stats.add("policy_timeouts")
            raise ApiError(503, f"the policy did not answer within {timeout:g} s", kind="service_unavailable") from None
        except PolicyError as err:
            self.p.stats.add("policy_errors")
            raise ApiError(503, f"the policy failed: {err}", kind="service_unavailable") from None

    # -- turns to the judges ----------------------------------------------------------------

    def _flush(self, session: Session) -> None:
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
        if not self.p.train:
            self.p.log.write(turn.policy_version, turn_record(turn, None, None, "not_training", None))
            return
        self.p.stats.add("turns")
        try:
            self.p.turn_q.put_nowait(turn)
        except asyncio.QueueFull:  # the judges are behind: serving does not wait for them
            self.p.stats.mask("judge_backlog")
            self.p.log.write(turn.policy_version, turn_record(turn, None, None, "judge_backlog", None))

    def _end(self, session: Session) -> None:
        """Close the session's last turn without a next state (it is logged, not trained)."""
        if session.agent is not None and session.agent.pending:
            session.agent.abandon("ok")
        self._flush(session)
        session.agent = None

    async def _close_idle(self) -> None:
        timeout = self.cfg.session_timeout
        while True:
            await asyncio.sleep(min(timeout / 2, 5.0))
            now = time.monotonic()
            for sid, session in list(self.sessions.items()):
                if now - session.last_seen >= timeout and not session.lock.locked():
                    self._end(session)
                    del self.sessions[sid]
                    self.p.stats.add("sessions_timed_out")

    def metrics(self) -> dict[str, Any]:
        """The pipeline's counters plus the server's (``/metrics``)."""
        snap = self.p.snapshot()
        snap["sessions"] = len(self.sessions)
        snap["training"] = self.p.train
        return snap
