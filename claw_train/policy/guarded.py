"""``GuardedPolicy``: tells a bad request from a dead policy.

Retrying is the transport's job (:class:`~claw_train.policy.http.Servers` retries and fails over each remote
call; an in-process failure is not transient), so nothing here retries. When a call fails, a one-token health
probe decides: the policy answers (the request was bad: the ``PolicyError`` is re-raised) or it does not
(:class:`PolicyDown`: the run stops with a checkpoint).
"""

from __future__ import annotations

from typing import Any

from claw_train.policy.base import Policy, PolicyError, SamplingParams


class PolicyDown(PolicyError):
    """The policy failed and a health probe failed too: stop the run."""


class GuardedPolicy(Policy):
    """Wraps ``inner``; ``failures`` counts failed calls."""

    def __init__(self, inner: Policy):
        self.inner = inner
        self.tokenizer = getattr(inner, "tokenizer", None)
        self.failures = 0

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.inner.version

    async def _guard(self, call: Any) -> Any:
        try:
            return await call
        except PolicyError as err:
            self.failures += 1
            if not await self.healthy():
                raise PolicyDown(f"the policy failed and a health probe failed: {err}") from err
            raise

    async def healthy(self) -> bool:
        """Whether the policy answers a one-token request."""
        try:
            await self.inner.generate([0], SamplingParams(max_new_tokens=1))
        except PolicyError:
            return False
        return True

    async def generate(self, prompt: Any, sampling: SamplingParams) -> Any:
        return await self._guard(self.inner.generate(prompt, sampling))

    async def logprobs(self, prompt_ids: Any, completion_ids: Any, **kw: Any) -> list[float]:
        return await self._guard(self.inner.logprobs(prompt_ids, completion_ids, **kw))
