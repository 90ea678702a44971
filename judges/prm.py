"""The process reward judge: m votes on one step, majority over the valid ones."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.base import Judgement, Vote
from judges.parse import majority, parse_score
from judges.votes import VotingJudge, keep_text


class PRMJudge(VotingJudge):
    """Scores a step in {-1, 0, 1}: ``votes`` concurrent samples, each read from its last ``\\boxed{…}``.

    A tie or no valid vote scores 0. ``deadline`` (default: the backend's worst case plus a second) bounds
    the whole call; when the backend never answers, the judgement is ``available=False`` with score 0.
    """

    kind = "prm"

    def read(self, text: str, latency: float) -> Vote:
        """One PRM answer as a vote."""
        return Vote(parse_score(text), keep_text(text), latency=latency)

    async def score(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> Judgement:
        """Judge ``action`` by the ``next_state`` it led to; ``messages`` is the chat so far (optional)."""
        start = time.monotonic()
        self.metrics.inc("prm_calls")
        votes, available = await self._draw(action, next_state, messages)
        score = majority([v.score for v in votes])
        return Judgement(float(score), votes, latency=time.monotonic() - start, available=available)
