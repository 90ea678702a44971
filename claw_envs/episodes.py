"""One episode as a pool or an evaluation saw it: :class:`EpisodeResult`, and readers of its parts that evaluation
extensions share (the chat it started with, the info of each step)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from claw_envs.core import StepStatus


@dataclass
class EpisodeResult:
    """One episode as the pool saw it. ``infos`` holds the reset info first, then one per step."""

    task_id: str | None
    observations: list[Any] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    status: str = StepStatus.OK.value  # "ok" or a StepStatus value ("timeout", "infra_failure", ...)
    error: str | None = None


def first_messages(episode: EpisodeResult) -> list[dict[str, Any]]:
    """The chat the episode started with (its reset info's messages)."""
    return list(episode.infos[0].get("messages", [])) if episode.infos else []


def step_infos(episode: EpisodeResult) -> list[dict[str, Any]]:
    """The info of every step (the reset info left out)."""
    return [info for info in episode.infos[1:] if "next_state" in info]
