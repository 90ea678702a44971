"""Draw m judge samples for one step concurrently, under one deadline, and turn them into votes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.backends.base import BackendError, JudgeBackend, JudgeRequest, Kind
from judges.base import Vote
from judges.metrics import JudgeMetrics
from judges.prompts import PromptError, render

MAX_VOTE_TEXT = 16_000  # raw text kept per vote for logs; parsing always sees the whole answer
CANCEL_GRACE = 0.1

Reader = Callable[[str, float], Vote]


def keep_text(text: str) -> str:
    """The raw answer as stored in a :class:`Vote` (very long answers are cut, saying so)."""
    if len(text) <= MAX_VOTE_TEXT:
        return text
    return f"{text[:MAX_VOTE_TEXT]}\n[... {len(text) - MAX_VOTE_TEXT} more characters not kept]"


async def draw_votes(
    backend: JudgeBackend,
    kind: Kind,
    template: str | None,
    next_state: NextState,
    action: str,
    history: Sequence[Mapping[str, Any]] | None,
    read: Reader,
    *,
    votes: int,
    temperature: float,
    max_tokens: int,
    deadline: float,
) -> tuple[list[Vote], bool]:
    """``votes`` answers read by ``read``, and whether the backend answered at all. Never raises.

    A vote that failed (backend error, prompt error, deadline) has ``score=None`` and ``error`` set.
    """
    metrics = backend.metrics
    metrics.inc("votes", votes)
    prompt: list[dict[str, Any]] = []
    if backend.uses_prompt:
        try:
            if template is None:
                raise PromptError(f"the {backend.name} judge needs a prompt template for {kind!r} votes")
            prompt = render(template, next_state, action, history=history)
        except PromptError as err:
            metrics.inc("prompt_errors")
            metrics.inc("votes_failed", votes)
            return [Vote(None, "", error=f"prompt: {err}") for _ in range(votes)], False

    async def one(index: int) -> Vote:
        start = time.monotonic()
        request = JudgeRequest(kind, prompt, next_state, action, temperature, max_tokens, index)
        try:
            text = await backend.complete(request)
        except BackendError as err:
            return Vote(None, "", latency=time.monotonic() - start, error=str(err))
        except Exception as err:  # a backend bug must not reach the training loop
            metrics.inc("backend_errors")
            return Vote(None, "", latency=time.monotonic() - start, error=f"backend: {type(err).__name__}: {err}")
        return read(text, time.monotonic() - start)

    tasks = [asyncio.create_task(one(i)) for i in range(votes)]
    try:
        _, pending = await asyncio.wait(tasks, timeout=deadline)
    finally:  # on the deadline, or when the caller itself is cancelled, no vote keeps running
        for task in tasks:
            if not task.done():
                task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=CANCEL_GRACE)
    result = []
    for task in tasks:
        if task in pending:
            metrics.inc("timeouts")
            result.append(Vote(None, "", latency=deadline, error=f"timeout: judge deadline of {deadline:g}s passed"))
        else:
            result.append(task.result())
    for vote in result:
        if vote.error is not None:
            metrics.inc("votes_failed")
        elif vote.score is None:
            metrics.inc("votes_invalid")
        else:
            metrics.inc("votes_valid")
    return result, any(v.error is None for v in result)


class VotingJudge:
    """What the PRM and hint judges share: a backend, a prompt template, and ``votes`` concurrent samples
    per step under one ``deadline`` (default: the backend's worst case plus a second)."""

    kind: Kind

    def __init__(
        self,
        backend: JudgeBackend,
        prompt_template: str | None,
        *,
        votes: int = 3,
        temperature: float = 0.6,
        max_tokens: int = 1024,
        deadline: float | None = None,
    ):
        if votes < 1:
            raise ValueError(f"a judge needs at least one vote, got votes={votes}")
        if backend.uses_prompt and prompt_template is None:
            raise ValueError(f"the {backend.name} judge needs a prompt template")
        self.backend = backend
        self.prompt_template = prompt_template
        self.votes = votes
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.deadline = deadline if deadline is not None else backend.worst_case_seconds + 1.0

    @property
    def metrics(self) -> JudgeMetrics:
        """The backend's counters."""
        return self.backend.metrics

    def read(self, text: str, latency: float) -> Vote:
        """One answer as a vote."""
        raise NotImplementedError

    async def _draw(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None
    ) -> tuple[list[Vote], bool]:
        """This judge's votes on one step (see :func:`draw_votes`); counts an unavailable backend."""
        votes, available = await draw_votes(
            self.backend,
            self.kind,
            self.prompt_template,
            next_state,
            action,
            messages,
            self.read,
            votes=self.votes,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            deadline=self.deadline,
        )
        if not available:
            self.metrics.inc("unavailable")
        return votes, available
