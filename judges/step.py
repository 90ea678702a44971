"""One object that judges a step: PRM votes and hint votes drawn at the same time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.base import Judgement
from judges.hint import HintJudge
from judges.metrics import JudgeMetrics
from judges.prm import PRMJudge


class StepJudge:
    """Runs ``prm`` and (when given) ``hint`` concurrently and merges them into one :class:`Judgement`."""

    def __init__(self, prm: PRMJudge, hint: HintJudge | None = None):
        self.prm = prm
        self.hint_judge = hint

    @property
    def metrics(self) -> JudgeMetrics:
        """The PRM backend's counters (shared with the hint judge when both use one backend)."""
        return self.prm.metrics

    def metrics_dict(self) -> dict[str, int]:
        """Every counter of every backend in use, summed (for the trainer's logs)."""
        counts = self.prm.metrics.as_dict()
        if self.hint_judge is not None and self.hint_judge.metrics is not self.prm.metrics:
            for key, value in self.hint_judge.metrics.as_dict().items():
                counts[key] += value
        return counts

    async def reachable(self) -> str | None:
        """None when every backend in use can answer; else why not."""
        for judge in (self.prm, self.hint_judge):
            problem = await judge.backend.reachable() if judge is not None else None
            if problem:
                return problem
        return None

    async def judge(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> Judgement:
        """Score ``action`` by ``next_state`` and look for a hint; never raises for judge failures."""
        start = time.monotonic()
        self.metrics.inc("steps")
        if self.hint_judge is None:
            scored = await self.prm.score(action, next_state, messages)
            return Judgement(scored.score, scored.votes, latency=time.monotonic() - start, available=scored.available)
        scored, hinted = await asyncio.gather(
            self.prm.score(action, next_state, messages), self.hint_judge.hint(action, next_state, messages)
        )
        return Judgement(
            scored.score,
            scored.votes,
            hint=hinted.hint,
            hint_votes=hinted.votes,
            latency=time.monotonic() - start,
            available=scored.available,
            hint_available=hinted.available,
        )

    async def aclose(self) -> None:
        """Close the backends' connections."""
        await self.prm.backend.aclose()
        if self.hint_judge is not None and self.hint_judge.backend is not self.prm.backend:
            await self.hint_judge.backend.aclose()
