"""Records that flow from rollouts to judges to the trainer, and what makes a sample untrainable."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from claw_envs.core import NextState


class Slot(Protocol):
    """An in-flight slot (:class:`claw_train.pipeline.budget.Slot`): released exactly once."""

    def release(self) -> None:
        """Give the slot back."""


@dataclass
class TurnRecord:
    """One policy turn, token-exact.

    ``prompt_ids`` are the exact tokens the policy saw (earlier turns' generated tokens included,
    observations appended as token segments, never a re-rendered chat); ``completion_ids`` and
    ``logprobs`` are exactly what it generated, by ``policy_version``. ``prompt_start`` is how many of the prompt's
    tokens the episode's turn before already had in its prompt (0 for a first turn): the log keeps only the rest.
    """

    episode_id: str
    group_id: str
    task_id: str
    step_index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    policy_version: int
    messages: list[dict[str, Any]]
    action_text: str
    finish_reason: str = "stop"
    next_state: NextState | None = None
    reward: float = 0.0
    status: str = "ok"
    info: dict[str, Any] = field(default_factory=dict)
    prompt_start: int = 0
    slot: Slot | None = field(default=None, repr=False, compare=False)
    """The in-flight slot the turn holds from its generation until it is trained or masked (``None``: no budget)."""

    def hold(self, slot: Slot | None) -> None:
        """Carry ``slot`` until :meth:`release_slot`."""
        self.slot = slot

    def release_slot(self) -> None:
        """Give the turn's in-flight slot back (trained, masked or dropped); at most once."""
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()

    def __getstate__(self) -> dict[str, Any]:  # a slot stays in the process that took it (turns cross to Ray)
        return {**self.__dict__, "slot": None}


@dataclass
class TrainSample:
    """One row for the trainer: a turn plus its per-token advantages."""

    turn: TurnRecord
    advantages: list[float]
    method: str
    score: float | None = None
    hint: str | None = None
    sample_id: str = ""


@dataclass
class EpisodeRecord:
    """One episode, token-exact: its turns and the whole token stream the policy saw and produced.

    ``token_ids`` is the first prompt followed, turn by turn, by the generated tokens and the
    observation segments; ``loss_mask`` is 1 exactly on generated tokens and ``logprobs`` holds their
    behaviour log-probs (0.0 elsewhere). Every turn's ``prompt_ids`` is a prefix of ``token_ids``.
    ``messages`` is the chat as the policy saw it (assistant turns as generated text, env messages
    verbatim) and ``tools`` the tool schemas the prompt was rendered with; ``env_messages`` is the env's
    own final history, which may store assistant turns in another form (e.g. OpenAI ``tool_calls``).
    """

    episode_id: str
    group_id: str
    task_id: str
    turns: list[TurnRecord]
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    env_messages: list[dict[str, Any]] = field(default_factory=list)
    outcome: float | None = None
    total_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    status: str = "ok"
    seed: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


def sample_problem(sample: TrainSample) -> str | None:
    """Why a sample cannot be trained on (``None`` when it can)."""
    turn = sample.turn
    n = len(turn.completion_ids)
    if n == 0:
        return "empty completion"
    if not turn.prompt_ids:
        return "empty prompt"
    if len(turn.logprobs) != n or len(sample.advantages) != n:
        return f"{n} completion tokens but {len(turn.logprobs)} log-probs and {len(sample.advantages)} advantages"
    if not all(math.isfinite(a) for a in sample.advantages):
        return "non-finite advantage"
    return None


def triage(sample: TrainSample, version: int, max_staleness: int) -> tuple[str | None, str | None]:
    """``(None, None)`` when ``sample`` is trained at ``version``; ``("stale", None)`` when it is more than
    ``max_staleness`` versions behind; ``("invalid", why)`` when it is malformed."""
    if version - sample.turn.policy_version > max_staleness:
        return "stale", None
    if problem := sample_problem(sample):
        return "invalid", problem
    return None, None
