"""The process reward judge: m votes on one step, majority over the valid ones."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.backends.base import JudgeBackend
from judges.base import Judgement, Vote
from judges.metrics import JudgeMetrics
from judges.parse import majority, parse_score
from judges.votes import draw_votes, keep_text


class PRMJudge:
    """Scores a step in {-1, 0, 1}: ``votes`` concurrent samples, each read from its last ``\\boxed{…}``.

    A tie or no valid vote scores 0. ``deadline`` (default: the backend's worst case plus a second) bounds
    the whole call; when the backend never answers, the judgement is ``available=False`` with score 0.
    """

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

    @staticmethod
    def read(text: str, latency: float) -> Vote:
        """One PRM answer as a vote."""
        return Vote(parse_score(text), keep_text(text), latency=latency)

    async def score(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> Judgement:
        """Judge ``action`` by the ``next_state`` it led to; ``messages`` is the chat so far (optional)."""
        start = time.monotonic()
        self.metrics.inc("prm_calls")
        votes, available = await draw_votes(
            self.backend,
            "prm",
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
        score = majority([v.score for v in votes])
        return Judgement(float(score), votes, latency=time.monotonic() - start, available=available)
