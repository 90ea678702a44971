"""A judge that is the policy model itself (the reference setup judges and teaches with its own base model).

``judges`` sits below ``claw_train``, so the policy is duck-typed: any object with
``async generate(messages, sampling)`` returning something with ``.text`` (and ``.finish_reason``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from judges.backends.base import BackendError, JudgeRequest, ResilientBackend
from judges.metrics import JudgeMetrics


class GeneratingPolicy(Protocol):
    """What this backend needs of a policy: ``async generate(prompt, sampling)``."""

    async def generate(self, prompt: Any, sampling: Any) -> Any:
        """A result with ``.text`` (and ``.finish_reason``) for ``prompt`` sampled with ``sampling``."""
        ...


@dataclass(frozen=True)
class JudgeSampling:
    """Sampling settings with the field names of ``claw_train.policy.SamplingParams``."""

    max_new_tokens: int = 512
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()


def text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flatten content parts to plain text; an image becomes a note, since a text policy cannot see it."""
    flat = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            pieces = []
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    pieces.append(str(part.get("text", "")))
                elif part.get("type") == "image_url":
                    pieces.append("[A screenshot was attached here; this judge reads text only.]")
            content = "\n".join(pieces)
        flat.append({**message, "content": content})
    return flat


class PolicyBackend(ResilientBackend):
    """Asks ``policy.generate(messages, sampling_type(max_new_tokens=…, temperature=…))`` for each vote.

    Pass ``sampling_type=claw_train.policy.SamplingParams`` from the trainer; the default
    :class:`JudgeSampling` has the same field names.
    """

    name = "policy"

    def __init__(
        self,
        policy: GeneratingPolicy,
        *,
        sampling_type: Callable[..., Any] = JudgeSampling,
        timeout: float = 120.0,
        retries: int = 1,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        failure_threshold: int = 5,
        reset_after: float = 30.0,
        metrics: JudgeMetrics | None = None,
    ):
        if not callable(getattr(policy, "generate", None)):
            raise TypeError(f"the policy judge needs an object with async generate(messages, sampling); got {policy!r}")
        super().__init__(
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            failure_threshold=failure_threshold,
            reset_after=reset_after,
            metrics=metrics,
        )
        self.policy = policy
        self.sampling_type = sampling_type

    async def _attempt(self, request: JudgeRequest) -> str:
        sampling = self.sampling_type(max_new_tokens=request.max_tokens, temperature=request.temperature)
        try:
            completion = await self.policy.generate(text_only(request.messages), sampling)
        except (TimeoutError, BackendError):
            raise
        except Exception as err:
            raise BackendError("backend", f"policy failed: {type(err).__name__}: {err}", retryable=True) from None
        if getattr(completion, "finish_reason", "stop") == "error":
            raise BackendError("backend", "policy reported finish_reason='error'", retryable=True)
        text = getattr(completion, "text", None)
        if not isinstance(text, str):
            raise BackendError("malformed", f"policy returned {type(completion).__name__} without text")
        return text
