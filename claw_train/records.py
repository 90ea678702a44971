"""Records that flow from rollouts to judges to the trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from claw_envs.core import NextState


@dataclass
class TurnRecord:
    """One policy turn, token-exact.

    ``prompt_ids`` are the exact tokens the policy saw (earlier turns' generated tokens included,
    observations appended as token segments, never a re-rendered chat); ``completion_ids`` and
    ``logprobs`` are exactly what it generated, by ``policy_version``.
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


@dataclass
class TrainSample:
    """One row for the trainer: a turn plus its per-token advantages."""

    turn: TurnRecord
    advantages: list[float]
    method: str
    score: float | None = None
    hint: str | None = None
    sample_id: str = ""
