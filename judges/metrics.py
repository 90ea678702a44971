"""Counters a judge keeps so that a trainer can log how healthy its signal is."""

from __future__ import annotations

import threading

COUNTERS = (
    "steps",  # StepJudge.judge calls
    "prm_calls",  # PRMJudge.score calls
    "hint_calls",  # HintJudge.hint calls
    "requests",  # backend attempts, retries included
    "votes",  # votes asked for (PRM and hint)
    "votes_valid",  # answered with a readable verdict
    "votes_invalid",  # answered, but no readable \boxed{1|0|-1}
    "votes_failed",  # no answer: timeout, HTTP error, circuit open ...
    "timeouts",
    "http_errors",
    "connection_errors",
    "malformed_responses",
    "backend_errors",  # anything else a backend raised
    "retries",
    "circuit_opened",  # times the breaker tripped
    "circuit_rejections",  # calls refused at once because the breaker was open
    "prompt_errors",  # a template could not be rendered (missing judge_inputs fields)
    "unavailable",  # judgements with available=False
    "hint_votes_accepted",
    "hint_votes_rejected",
    "hints_accepted",  # steps that got a hint
    "hints_none",  # steps that got none
)


class JudgeMetrics:
    """Named integer counters; ``as_dict()`` is what goes into the trainer's logs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (one of :data:`COUNTERS`)."""
        if name not in self._counts:
            raise KeyError(f"unknown judge counter {name!r}; known: {', '.join(COUNTERS)}")
        with self._lock:
            self._counts[name] += n

    def __getitem__(self, name: str) -> int:
        return self._counts[name]

    def as_dict(self) -> dict[str, int]:
        """A copy of every counter."""
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        nonzero = {k: v for k, v in self.as_dict().items() if v}
        return f"JudgeMetrics({nonzero})"
