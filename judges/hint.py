"""The hint judge for on-policy distillation: does the next state hold hindsight worth a hint?"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.backends.base import JudgeBackend
from judges.base import HintResult, Vote
from judges.metrics import JudgeMetrics
from judges.parse import MIN_HINT_CHARS, extract_hint, parse_score
from judges.votes import draw_votes, keep_text

MAX_HINT_CHARS = 1200


class HintJudge:
    """``votes`` concurrent samples; a vote is accepted when it says ``\\boxed{1}`` and carries a hint of
    more than ``min_hint_chars`` (and at most ``max_hint_chars``) characters in ``[HINT_START]…[HINT_END]``.
    The longest accepted hint wins; none accepted means no hint (no OPD sample).

    An accepted vote has ``hint`` set; a rejected one has ``hint=None``.
    """

    def __init__(
        self,
        backend: JudgeBackend,
        prompt_template: str | None,
        *,
        votes: int = 3,
        temperature: float = 0.6,
        max_tokens: int = 1024,
        min_hint_chars: int = MIN_HINT_CHARS,
        max_hint_chars: int = MAX_HINT_CHARS,
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
        self.min_hint_chars = min_hint_chars
        self.max_hint_chars = max_hint_chars
        self.deadline = deadline if deadline is not None else backend.worst_case_seconds + 1.0

    @property
    def metrics(self) -> JudgeMetrics:
        """The backend's counters."""
        return self.backend.metrics

    def read(self, text: str, latency: float) -> Vote:
        """One hint answer as a vote; ``hint`` is set only when the vote is accepted."""
        score = parse_score(text)
        hint = extract_hint(text, self.min_hint_chars)
        accepted = score == 1 and hint is not None and len(hint) <= self.max_hint_chars
        return Vote(score, keep_text(text), hint=hint if accepted else None, latency=latency)

    async def hint(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> HintResult:
        """The best hint for ``action`` given ``next_state`` (``None`` when no vote was accepted)."""
        start = time.monotonic()
        self.metrics.inc("hint_calls")
        votes, available = await draw_votes(
            self.backend,
            "hint",
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
        accepted = [v.hint for v in votes if v.hint is not None]
        self.metrics.inc("hint_votes_accepted", len(accepted))
        self.metrics.inc("hint_votes_rejected", len(votes) - len(accepted))
        self.metrics.inc("hints_accepted" if accepted else "hints_none")
        if not available:
            self.metrics.inc("unavailable")
        best = max(accepted, key=len) if accepted else None
        return HintResult(best, votes, latency=time.monotonic() - start, available=available)
