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
  ``session_timeout`` seconds of silence, and a new session arriving when ``max_sessions`` are open (the
  longest-silent one not mid-request is closed).
* **Side turns** (``X-Turn-Type: side``): served from the request's messages, logged, never trained.
* **Sampling.** Trained main turns sample at the trainer's temperature (its log-probs are the ones trained on); a
  request's other ``temperature`` or ``top_p`` is refused there, said in an ``X-Claw-Sampling`` response header
  (:meth:`LiveSessions.sampling_refused`), and used for side and one-off turns and with ``--no-train``;
  ``max_tokens`` above ``--max-new-tokens`` is clamped to it.
* **Streaming.** With ``on_text`` a request's reply is handed on piece by piece as the policy generates it
  (:meth:`~claw_train.policy.base.Policy.stream`); what is recorded and trained is the same token-exact completion.
* **Off the event loop.** Rendering the chat template, tokenising and reading next states run in worker threads
  (``asyncio.to_thread``), so one large request never stalls the others or ``/healthz``; a prompt whose characters
  alone prove it longer than the model's context is refused before it is tokenised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from claw_train.agent_loop import EpisodeAgent, TokenTranscript
from claw_train.options.tree import ServingConfig
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.turns import TurnQueue
from claw_train.policy.base import Completion, Policy, PolicyError, SamplingParams
from claw_train.policy.render import render_prompt
from claw_train.runlog.decisions import turn_record
from claw_train.runlog.logs import VersionedLog
from claw_train.runlog.metrics import Stats
from claw_train.samples.records import TurnRecord
from claw_train.serve.schema import ApiError, ChatRequest

if TYPE_CHECKING:
    from claw_envs.spec import LiveAdapter


@dataclass
class Session:
    """One conversation: its lock (main turns one at a time) and its token-exact transcript."""

    id: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    agent: EpisodeAgent | None = None
    emitted: int = 0
    last_seen: float = field(default_factory=time.monotonic)

    def touch(self) -> None:
        """The session was heard from now."""
        self.last_seen = time.monotonic()

    def start(self, agent: EpisodeAgent) -> None:
        """A new transcript: ``agent`` plays the session's turns from here."""
        self.agent, self.emitted = agent, 0

    def forget(self) -> None:
        """No transcript to continue (the next main request starts a new one)."""
        self.agent = None

    def handed_on(self, n: int) -> None:
        """The first ``n`` turns of the transcript have gone to the judges (or the logs)."""
        self.emitted = n


def continues(transcript: list[dict[str, Any]], messages: list[dict[str, Any]]) -> bool:
    """Whether ``messages`` repeat ``transcript`` (ending in our assistant turn) and only add user/tool messages."""
    if len(messages) <= len(transcript) or transcript[-1]["role"] != "assistant":
        return False
    for ours, theirs in zip(transcript, messages, strict=False):
        if ours["role"] != theirs["role"] or (ours["role"] != "assistant" and ours != theirs):
            return False
    return all(m["role"] in ("user", "tool") for m in messages[len(transcript) :])


class LiveSessions:
    """The sessions of one server, feeding the pipeline's judges (see the module docstring).

    ``policy`` is the serving backend itself (serving does not retry: a failure is a 503 to the client); ``live``
    reads a session's new messages as the previous turn's next state (the family's ``FamilySpec.live``);
    ``sampling`` holds the trainer's temperature and the generation budget; turns go to ``turns`` when ``train``,
    else only to ``log``; ``snapshot`` is the run's counters (``/metrics``).
    """

    def __init__(
        self,
        serving: ServingConfig,
        *,
        policy: Policy,
        live: LiveAdapter,
        control: RunControl,
        stats: Stats,
        log: VersionedLog,
        turns: TurnQueue,
        sampling: SamplingParams,
        train: bool,
        snapshot: Callable[[], dict[str, Any]],
    ):
        self.cfg = serving
        self.serving = policy
        self.live = live
        self.control = control
        self.stats = stats
        self.log = log
        self.turns = turns
        self.defaults = sampling
        self.train = train
        self.snapshot = snapshot
        self.sessions: dict[str, Session] = {}
        self.ready = asyncio.Event()
        self._longest_token: int | None = None

    def start(self) -> list[asyncio.Task]:
        """The idle-session closer; marks the server ready."""
        self.stats.set_status("serving" if self.train else "serving (not training)")
        self.ready.set()
        return [asyncio.create_task(self._close_idle())]

    async def chat(
        self, req: ChatRequest, session_id: str | None, turn_type: str, on_text: OnText | None = None
    ) -> tuple[Completion, int]:
        """Serve one request; returns the completion and its prompt length in tokens. ``on_text`` (streaming) gets
        the reply's text piece by piece while it is generated."""
        if self.control.stopping:
            raise ApiError(503, "the server is shutting down", kind="service_unavailable")
        await self.control.served.wait()
        self.stats.add("requests")
        if turn_type == "side" or session_id is None:
            kind = "side" if turn_type == "side" else "one_off"
            self.stats.add(f"{kind}_turns")
            return await self._one_off(req, session_id, kind, on_text)
        session = self.sessions.get(session_id)
        if session is None:
            self._make_room()
            session = self.sessions[session_id] = Session(session_id)
        async with session.lock:  # main turns of one session, one at a time
            session.touch()
            try:
                return await self._main_turn(session, req, on_text)
            finally:
                session.touch()

    def sampling_refused(self, req: ChatRequest, session_id: str | None, turn_type: str) -> str | None:
        """Why ``req``'s own ``temperature``/``top_p`` will not be used (a trained main turn), or None."""
        if not (self.train and session_id and turn_type == "main"):
            return None
        own = self.defaults.temperature
        asked = []
        if req.temperature is not None and req.temperature != own:
            asked.append(f"temperature {req.temperature:g}")
        if req.top_p is not None and req.top_p != 1.0:
            asked.append(f"top_p {req.top_p:g}")
        if not asked:
            return None
        return (f"{' and '.join(asked)} not used: a trained turn samples at the trainer's temperature {own:g}, "
                "top_p 1 (X-Turn-Type: side, or claw-serve --no-train, samples as asked)")  # fmt: skip

    def sampling(self, req: ChatRequest, trained: bool) -> SamplingParams:
        """Sampling for ``req``: a trained turn samples at the trainer's temperature; ``max_tokens`` is clamped."""
        cap = self.defaults.max_new_tokens
        tokens = min(req.max_tokens or cap, cap)
        temperature = self.defaults.temperature
        if trained:
            return SamplingParams(max_new_tokens=tokens, temperature=temperature, seed=req.seed, stop=req.stop)
        return SamplingParams(
            max_new_tokens=tokens,
            temperature=temperature if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            seed=req.seed,
            stop=req.stop,
        )

    async def _main_turn(self, session: Session, req: ChatRequest, on_text: OnText | None) -> tuple[Completion, int]:
        self._check_chars(req)
        agent = session.agent
        if (
            agent is not None
            and agent.pending
            and agent.transcript is not None
            and agent.transcript.tools == req.tools
            and continues(agent.transcript.messages, req.messages)
        ):
            try:
                await asyncio.to_thread(self._continue, agent, req.messages)
            except ApiError:
                self._end(session)
                raise
            self._flush(session)
        else:
            self._end(session)
            agent = EpisodeAgent(self.serving, self.defaults, group_id=session.id)
            transcript = await asyncio.to_thread(_rendered, TokenTranscript, agent.tokenizer, req.messages, req.tools)
            agent.begin(transcript, session.id)
            session.start(agent)
        prompt_tokens = len(agent.transcript.ids)
        self._check_length(prompt_tokens)
        streaming = _Streaming(self.serving, on_text) if on_text is not None else None
        sampling = self.sampling(req, trained=self.train)
        try:
            await self._generate(agent.act(None, {"messages": req.messages}, policy=streaming, sampling=sampling))
        except ApiError:
            session.forget()  # the transcript holds a turn the client never got: start afresh next time
            raise
        return agent.last, prompt_tokens

    def _continue(self, agent: EpisodeAgent, messages: list[dict[str, Any]]) -> None:
        """Record the new messages as the pending turn's next state (a worker thread: templates and tokenising)."""
        before = agent.transcript.messages  # type: ignore[union-attr]
        new = messages[len(before) :]
        try:
            ns = self.live.next_state(new, before[:-1], before[-1]["content"], len(agent.turns) + 1)
        except Exception as err:
            raise ApiError(400, f"cannot read these messages as a reply: {type(err).__name__}: {err}") from None
        _rendered(agent.observe, 0.0, {"messages": messages, "next_state": ns})

    async def _one_off(
        self, req: ChatRequest, session_id: str | None, kind: str, on_text: OnText | None
    ) -> tuple[Completion, int]:
        self._check_chars(req)
        ids = await asyncio.to_thread(_rendered, render_prompt, self.serving.tokenizer, req.messages, tools=req.tools)
        self._check_length(len(ids))
        sampling = self.sampling(req, trained=False)
        policy = self.serving if on_text is None else _Streaming(self.serving, on_text)
        completion = await self._generate(policy.generate(ids, sampling))
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

    def _check_chars(self, req: ChatRequest) -> None:
        """Refuse, before tokenising, a prompt that cannot fit: no token is longer than the vocabulary's longest
        entry, so ``chars > context × longest`` proves more tokens than the context holds."""
        limit = getattr(self.serving, "max_positions", None)
        if limit is None:
            return
        if self._longest_token is None:
            vocab = getattr(self.serving.tokenizer, "get_vocab", dict)()
            self._longest_token = max((len(t) for t in vocab), default=0) or -1
        if self._longest_token <= 0:
            return
        chars = sum(len(m["content"]) for m in req.messages)
        if chars > limit * self._longest_token:
            message = f"the prompt has {chars} characters: more tokens than the model's context ({limit})"
            raise ApiError(400, message, param="messages")

    async def _generate(self, call: Any) -> Any:
        timeout = self.cfg.request_timeout
        try:
            return await asyncio.wait_for(call, timeout)
        except TimeoutError:
            self.stats.add("policy_timeouts")
            raise ApiError(503, f"the policy did not answer within {timeout:g} s", kind="service_unavailable") from None
        except PolicyError as err:
            self.stats.add("policy_errors")
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
        session.handed_on(len(agent.turns))

    def _hand_over(self, turn: TurnRecord) -> None:
        reason = "not_training" if not self.train else None
        if reason is None and not self.turns.offer(turn):  # the judges are behind: serving does not wait for them
            self.stats.mask("judge_backlog")
            reason = "judge_backlog"
        if reason is not None:
            record = turn_record(turn, None, None, reason, None, tokenizer=self.serving.tokenizer)
            self.log.write(turn.policy_version, record)

    def _end(self, session: Session) -> None:
        """Close the session's last turn without a next state (it is logged, not trained)."""
        if session.agent is not None and session.agent.pending:
            session.agent.abandon("ok")
        self._flush(session)
        session.forget()

    def _make_room(self) -> None:
        """Below ``max_sessions``, or close the longest-silent session not mid-request; a 429 when all are busy."""
        if len(self.sessions) < self.cfg.max_sessions:
            return
        idle = [s for s in self.sessions.values() if not s.lock.locked()]
        if not idle:
            raise ApiError(
                429,
                f"{len(self.sessions)} sessions are mid-request (max_sessions {self.cfg.max_sessions}); retry shortly",
                kind="rate_limit_error",
                headers={"Retry-After": "1"},
            )
        self._close(min(idle, key=lambda s: s.last_seen), "sessions_evicted")

    def _close(self, session: Session, counter: str) -> None:
        """End ``session`` (its last turn logged, not trained), forget it, and count it under ``counter``."""
        self._end(session)
        del self.sessions[session.id]
        self.stats.add(counter)

    async def _close_idle(self) -> None:
        timeout = self.cfg.session_timeout
        while True:
            await asyncio.sleep(min(timeout / 2, 5.0))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if now - session.last_seen >= timeout and not session.lock.locked():
                    self._close(session, "sessions_timed_out")

    def metrics(self) -> dict[str, Any]:
        """The pipeline's counters plus the server's (``/metrics``)."""
        snap = self.snapshot()
        snap["sessions"] = len(self.sessions)
        snap["training"] = self.train
        return snap


OnText = Callable[[str], None]


def _rendered(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, whose failure to render the request's messages (a chat template raises anything a
    template can) is the client's 400."""
    try:
        return fn(*args, **kwargs)
    except ApiError:
        raise
    except Exception as err:
        raise ApiError(
            400,
            f"cannot render these messages with the model's chat template: {type(err).__name__}: {err}",
            param="messages",
        ) from None


class _Streaming(Policy):
    """``inner`` for one request whose text goes to ``on_text`` as it is generated; ``generate`` returns the same
    token-exact completion (a rollout records it as ever)."""

    def __init__(self, inner: Policy, on_text: OnText):
        self.inner, self.on_text = inner, on_text
        self.tokenizer = getattr(inner, "tokenizer", None)

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.inner.version

    async def generate(
        self,
        prompt: Sequence[Any],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        async for item in self.inner.stream(prompt, sampling, tools=tools):
            if isinstance(item, Completion):
                return item
            self.on_text(item)
        raise PolicyError("the policy's stream ended without a completion")
