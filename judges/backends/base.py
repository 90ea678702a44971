"""What every judge backend implements, and the retry / timeout / circuit-breaker wrapper model backends share."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.core import NextState
from claw_envs.retry import delay, retry_async
from judges.metrics import JudgeMetrics

Kind = Literal["prm", "hint"]
ErrorKind = Literal["timeout", "http", "connection", "malformed", "circuit_open", "backend"]

_COUNTER_FOR: dict[str, str] = {
    "timeout": "timeouts",
    "http": "http_errors",
    "connection": "connection_errors",
    "malformed": "malformed_responses",
    "circuit_open": "circuit_rejections",
    "backend": "backend_errors",
}


@dataclass(frozen=True)
class JudgeRequest:
    """One judge sample to draw: the rendered prompt plus the raw step, for backends that read it directly."""

    kind: Kind
    messages: list[dict[str, Any]]
    next_state: NextState
    action: str
    temperature: float = 0.6
    max_tokens: int = 512
    vote_index: int = 0


class BackendError(Exception):
    """A backend could not produce text. ``kind`` says why; ``retryable`` whether trying again may help."""

    def __init__(self, kind: ErrorKind, message: str, *, retryable: bool = False):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.retryable = retryable


class JudgeBackend:
    """Draws one judge sample's text for a :class:`JudgeRequest`; raises :class:`BackendError` when it cannot.

    ``uses_prompt`` is ``False`` for backends that read the next state directly (rules), so judges skip
    rendering templates for them.
    """

    name: str = "backend"
    uses_prompt: bool = True

    def __init__(self, metrics: JudgeMetrics | None = None):
        self.metrics = metrics if metrics is not None else JudgeMetrics()

    @property
    def available(self) -> bool:
        """``False`` while the backend refuses calls (its circuit is open)."""
        return True

    @property
    def worst_case_seconds(self) -> float:
        """The longest one :meth:`complete` call should take (judges set their deadline from it)."""
        return 60.0

    async def reachable(self) -> str | None:
        """None when the backend can answer; else why not (checked once when a run starts)."""
        return None

    async def complete(self, request: JudgeRequest) -> str:
        """The judge model's raw text for ``request``; raises :class:`BackendError` when the backend fails."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections."""


class CircuitBreaker:
    """Opens after ``threshold`` consecutive failures; after ``reset_after`` seconds lets one trial call through.

    A success closes it; a failed trial opens it again for another ``reset_after`` seconds.
    """

    def __init__(self, threshold: int = 5, reset_after: float = 30.0):
        if threshold < 1:
            raise ValueError(f"circuit breaker threshold must be >= 1, got {threshold}")
        self.threshold = threshold
        self.reset_after = reset_after
        self.failures = 0
        self.opened_at: float | None = None
        self._trial_running = False

    @property
    def is_open(self) -> bool:
        """Whether calls are being refused now (open, and not yet due for a trial)."""
        return self.opened_at is not None and time.monotonic() - self.opened_at < self.reset_after

    def allow(self) -> bool:
        """Whether a call may go out now (claims the single trial slot when half-open)."""
        if self.opened_at is None:
            return True
        if self.is_open or self._trial_running:
            return False
        self._trial_running = True
        return True

    def record_success(self) -> None:
        """A call succeeded: close the circuit and reset the failure count."""
        self.failures = 0
        self.opened_at = None
        self._trial_running = False

    def record_failure(self) -> bool:
        """Count a failure; returns ``True`` when this failure (re)opened the circuit."""
        self.failures += 1
        was_trial = self._trial_running
        self._trial_running = False
        if was_trial or (self.opened_at is None and self.failures >= self.threshold):
            self.opened_at = time.monotonic()
            return True
        return False


class ResilientBackend(JudgeBackend):
    """A model backend: each call gets a hard ``timeout``, up to ``retries`` retries with exponential
    backoff (``backoff * 2**k`` seconds, at most ``max_backoff``), and a shared :class:`CircuitBreaker`.

    Subclasses implement :meth:`_attempt`.
    """

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        failure_threshold: int = 5,
        reset_after: float = 30.0,
        metrics: JudgeMetrics | None = None,
    ):
        super().__init__(metrics)
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError("timeout must be > 0, retries and backoff >= 0")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.breaker = CircuitBreaker(failure_threshold, reset_after)

    @property
    def available(self) -> bool:
        return not self.breaker.is_open

    @property
    def worst_case_seconds(self) -> float:
        """The longest one :meth:`complete` call can take: every attempt timing out, with backoff between."""
        waits = sum(delay(k, self.backoff, self.max_backoff) for k in range(self.retries))
        return self.timeout * (self.retries + 1) + waits

    async def _attempt(self, request: JudgeRequest) -> str:
        raise NotImplementedError

    async def complete(self, request: JudgeRequest) -> str:
        """Call the backend with per-call timeouts, retries with backoff and the circuit breaker."""
        failed: list[BackendError] = []
        final: list[BackendError] = []  # an error not to retry, whatever its kind

        async def attempt() -> str:
            if not self.breaker.allow():
                if failed:  # the breaker opened during these retries: report the real failure
                    final.append(failed[-1])
                    raise failed[-1]
                self.metrics.inc("circuit_rejections")
                raise BackendError("circuit_open", f"{self.name} judge is unavailable after repeated failures")
            if failed:
                self.metrics.inc("retries")
            self.metrics.inc("requests")
            try:
                async with asyncio.timeout(self.timeout):
                    text = await self._attempt(request)
            except TimeoutError:
                err = BackendError("timeout", f"no answer within {self.timeout:g}s", retryable=True)
            except BackendError as raised:
                err = raised
            except Exception as bug:  # a backend bug must not escape into the training loop
                err = BackendError("backend", f"{type(bug).__name__}: {bug}")
            else:
                self.breaker.record_success()
                return text
            failed.append(err)
            self.metrics.inc(_COUNTER_FOR[err.kind])
            if self.breaker.record_failure():
                self.metrics.inc("circuit_opened")
            raise err

        return await retry_async(
            attempt,
            retries=self.retries,
            backoff=self.backoff,
            cap=self.max_backoff,
            retry_on=lambda err: isinstance(err, BackendError) and err.retryable and not final,
        )
