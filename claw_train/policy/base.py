"""One async interface in front of every policy backend (inprocess, sglang, openai)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Message = Mapping[str, Any]


class PolicyError(Exception):
    """The policy backend failed (server down, bad model path, malformed reply) — said clearly."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature`` must equal the trainer's (TRL divides training logits by it)."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completion:
    """Token-in, token-out: exactly what the policy generated, with its log-probs and version."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "error"
    policy_version: int
    prompt_ids: list[int] = field(default_factory=list)


class Policy:
    """A policy backend. ``generate`` takes chat messages or exact prompt token ids.

    ``tokenizer`` is the model's tokenizer when the backend has one (inprocess, sglang): token-exact
    rollouts render prompts and observation segments with it.
    """

    version: int = 0
    tokenizer: Any = None

    async def generate(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        """Complete ``prompt``; chat messages are rendered with the generation prompt (and ``tools``, if any)."""
        raise NotImplementedError

    async def stream(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> AsyncIterator[str | Completion]:
        """:meth:`generate`, yielding the text as it is generated: ``str`` pieces, then the finished
        :class:`Completion` (always the last item; what a token-exact caller records). The pieces join to the
        completion's text. This default yields the whole text once, when generation is over; backends that can
        do better (inprocess: one piece per token) override it."""
        completion = await (self.generate(prompt, sampling, tools=tools) if tools else self.generate(prompt, sampling))
        if completion.text:
            yield completion.text
        yield completion

    async def logprobs(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], *, temperature: float = 1.0
    ) -> list[float]:
        """Per-token log-probs of ``completion_ids`` after ``prompt_ids`` (a prefill; OPD's teacher), under the
        ``temperature``-scaled distribution as for sampled tokens."""
        raise NotImplementedError

    def publish(self, weights: Any, version: int) -> None:
        """Swap in new weights (a state dict or a path) between generations; old ones keep serving on failure."""
        raise NotImplementedError(f"{type(self).__name__} cannot take weight updates")

    def set_training(self, active: bool) -> None:
        """A trainer in this process started (``True``) or ended an optimizer step: a backend that computes on this
        machine's CPU cores leaves them to it meanwhile. Remote backends ignore it."""

    async def aclose(self) -> None:
        """Stop workers and connections."""
