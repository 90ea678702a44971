"""The pipeline's types: what a turn source is (:class:`TurnSource`) and is built from (:class:`RunParts`), the
parts of a running pipeline (:class:`Parts`), and what a run returns (:class:`PipelineResult`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from claw_envs import FamilySpec
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.episode_runner import EpisodeRunner
from claw_train.pipeline.evaluations import Evaluations
from claw_train.pipeline.judge_workers import JudgeWorkers
from claw_train.pipeline.trainer_thread import TrainerThread
from claw_train.pipeline.turns import TurnQueue
from claw_train.policy.base import SamplingParams
from claw_train.policy.guarded import GuardedPolicy
from claw_train.runlog.logs import VersionedLog
from claw_train.runlog.metrics import Stats
from judges.base import Judge


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


@dataclass(frozen=True)
class Parts:
    """The parts of one running pipeline, built together before any starts (:meth:`Pipeline._build`)."""

    log: VersionedLog
    policy: GuardedPolicy
    judge: Judge
    evaluations: Evaluations | None
    """None outside ``claw-train`` (claw-serve evaluates nothing)."""
    judges: JudgeWorkers
    trainer: TrainerThread | None
    """None when the run only serves (``train=False``)."""
    runner: EpisodeRunner | None
    """None with a given turn source (claw-serve's sessions)."""
    budget: InFlightBudget | None
    """None in sync mode and with a given turn source."""
    source: TurnSource


async def close_part(part: Any) -> None:
    """Close a part, whatever it raises, within a minute."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(part.aclose(), 60)
