"""The hint judge for on-policy distillation: does the next state hold hindsight worth a hint?"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.core import NextState
from judges.backends.base import JudgeBackend
from judges.base import HintResult, Vote
from judges.parse import MIN_HINT_CHARS, extract_hint, parse_score
from judges.votes import VotingJudge, keep_text

MAX_HINT_CHARS = 1200


class HintJudge(VotingJudge):
    """``votes`` concurrent samples; a vote is accepted when it says ``\\boxed{1}`` and carries a hint of
    more than ``min_hint_chars`` (and at most ``max_hint_chars``) characters in ``[HINT_START]…[HINT_END]``.
    The longest accepted hint wins; none accepted means no hint (no OPD sample).

    An accepted vote has ``hint`` set; a rejected one has ``hint=None``.
    """

    kind = "hint"

    def __init__(
        self,
        backend: JudgeBackend,
        prompt_template: str | None,
        *,
        min_hint_chars: int = MIN_HINT_CHARS,
        max_hint_chars: int = MAX_HINT_CHARS,
        **options: Any,
    ):
        super().__init__(backend, prompt_template, **options)
        self.min_hint_chars = min_hint_chars
        self.max_hint_chars = max_hint_chars

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
        votes, available = await self._draw(action, next_state, messages)
        accepted = [v.hint for v in votes if v.hint is not None]
        self.metrics.inc("hint_votes_accepted", len(accepted))
        self.metrics.inc("hint_votes_rejected", len(votes) - len(accepted))
        self.metrics.inc("hints_accepted" if accepted else "hints_none")
        best = max(accepted, key=len) if accepted else None
        return HintResult(best, votes, latency=time.monotonic() - start, available=available)
