"""What a judge is and returns, shared by the PRM judge, the hint judge, every backend and the trainer."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from claw_envs.core import NextState


@dataclass(frozen=True)
class Vote:
    """One judge sample: the parsed score (``None`` when invalid), its raw text, its hint if any.

    ``error`` is set when the backend gave no answer (timeout, HTTP error, circuit open, prompt error).
    """

    score: int | None
    text: str
    hint: str | None = None
    latency: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for logs."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class HintResult:
    """What :class:`judges.HintJudge` returns: the chosen hint (or ``None``) and every vote."""

    hint: str | None
    votes: list[Vote] = field(default_factory=list)
    latency: float = 0.0
    available: bool = True


@dataclass(frozen=True)
class Judgement:
    """The outcome of judging one step.

    ``score`` is the majority vote in {-1, 0, 1} (0 on a tie or no valid vote); ``hint`` is the
    accepted OPD hint or ``None``; ``available`` is ``False`` when the backend could not answer
    (down, circuit open), in which case trainers mask the step instead of learning a 0.
    ``hint_available`` says the same of the hint votes (``None`` hint for lack of an answer).
    """

    score: float
    votes: list[Vote] = field(default_factory=list)
    hint: str | None = None
    hint_votes: list[Vote] = field(default_factory=list)
    latency: float = 0.0
    available: bool = True
    hint_available: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view for logs."""
        return dataclasses.asdict(self)


@runtime_checkable
class Judge(Protocol):
    """What the trainer needs of a judge (:class:`~judges.StepJudge` is the built-in one; a test or a plugin may
    bring its own)."""

    async def judge(
        self, action: str, next_state: NextState, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> Judgement:
        """Score ``action`` by ``next_state`` (and look for a hint); never raises for the backend's failures."""
        ...

    def metrics_dict(self) -> dict[str, int]:
        """Counters for the trainer's logs (calls, errors, timeouts…); empty when it keeps none."""
        ...

    async def reachable(self) -> str | None:
        """``None`` when the judge can answer; else why not (the run stops before it starts)."""
        ...

    async def aclose(self) -> None:
        """Close connections."""
        ...
