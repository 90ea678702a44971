"""The pipeline's public types: what a turn source is (:class:`TurnSource`) and is built from (:class:`RunParts`),
and what a run returns (:class:`PipelineResult`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from claw_envs import FamilySpec
from claw_train.logs import VersionedLog
from claw_train.metrics import Stats
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.turns import TurnQueue
from claw_train.policy.base import SamplingParams
from claw_train.policy.guarded import GuardedPolicy


class TurnSource(Protocol):
    """Where turns come from: env rollouts, sync rounds, or the server's live sessions."""

    def start(self) -> list[asyncio.Task]:
        """Start the source's tasks (they hand turns to the judges)."""
        ...


@dataclass(frozen=True)
class RunParts:
    """The loaded parts a custom turn source is built from (``Pipeline(source=...)``: claw-serve's live
    sessions)."""

    control: RunControl
    stats: Stats
    log: VersionedLog
    policy: GuardedPolicy
    sampling: SamplingParams
    turns: TurnQueue
    spec: FamilySpec
    train: bool
    snapshot: Callable[[], dict[str, Any]]


@dataclass
class PipelineResult:
    """How a run ended and what it measured."""

    status: str  # "done" | "interrupted" | "policy_failed" | "error"
    message: str
    updates: int
    wall_time: float
    evals: list[dict[str, Any]]
    counters: dict[str, Any]
    output_dir: Path
    checkpoint: Path | None = None

    @property
    def exit_code(self) -> int:
        """The process exit status: 0 when done, 130 when interrupted, else 1."""
        return {"done": 0, "interrupted": 130}.get(self.status, 1)
