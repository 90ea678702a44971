"""What a judge returns, shared by the PRM judge, the hint judge and every backend."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Vote:
    """One judge sample: the parsed score (``None`` when invalid), its raw text, its hint if any."""

    score: int | None
    text: str
    hint: str | None = None
    latency: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class Judgement:
    """The outcome of judging one step.

    ``score`` is the majority vote in {-1, 0, 1} (0 on a tie or no valid vote); ``hint`` is the
    accepted OPD hint or ``None``; ``available`` is ``False`` when the backend could not answer
    (down, circuit open), in which case trainers mask the step instead of learning a 0.
    """

    score: float
    votes: list[Vote] = field(default_factory=list)
    hint: str | None = None
    hint_votes: list[Vote] = field(default_factory=list)
    latency: float = 0.0
    available: bool = True
