"""How ``claw-eval`` (and ``claw-train --eval-every``) score an env family: the generic rules, and the hooks a
family overrides in its own extension (named by ``FamilySpec.evaluation``).

The generic evaluation runs ``k`` episodes on each of ``n`` held-out tasks and reports the mean outcome, the
success rate (avg@k: an episode succeeds when its outcome reaches ``success_at``) and pass@k, each with a
bootstrap confidence interval, plus one record per episode. An extension adds fields to each record and
metrics to the summary (conversation: the personalization rubric; toolcall: the answers), may restrict
episodes (``env_kwargs``: one reply for the personalization score), and may grade precomputed responses or
offer scripted policies. Nothing here imports torch: the policy side lives in ``claw_train.evaluation``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from claw_envs.episodes import EpisodeResult
from claw_envs.tasks import Task, TaskSource

ScriptedReply = Callable[[Sequence[Mapping[str, Any]], int], str]
"""``reply(messages, seed) -> text``: a scripted policy."""


class Evaluation:
    """The generic evaluation; a family's extension subclasses it and overrides the hooks it needs."""

    success_at: float = 1.0
    """An episode whose outcome is at least this counts as a success."""
    score_name: str = "mean outcome"
    """What the headline score (the mean outcome) is called in tables and curves."""
    success_name: str = "success"
    """What an episode reaching ``success_at`` means, as the success rate is labelled beside the score."""

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options = dict(options or {})

    def env_kwargs(self) -> dict[str, Any]:
        """Extra env constructor arguments for evaluation episodes."""
        return {}

    def select(self, tasks: TaskSource, n: int) -> list[Task]:
        """The held-out tasks to evaluate: the first ``n``."""
        chosen = []
        for task in tasks:
            if len(chosen) >= n:
                break
            chosen.append(task)
        return chosen

    def record(self, episode: EpisodeResult) -> dict[str, Any]:
        """Extra fields for one episode's record."""
        return {}

    def summary(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Extra summary metrics over every graded episode's record."""
        return {}

    def rows(self, summary: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Extra ``(metric, value)`` rows for the summary table."""
        return []

    def grade_responses(self, path: Path, tasks: TaskSource) -> list[dict[str, Any]]:
        """Records for a file of precomputed responses (``--responses``): one per response, with ``task_id``,
        ``outcome`` and ``success``. Families without a way to grade text alone raise ``ValueError``."""
        raise ValueError("this family cannot grade precomputed responses; run a --policy instead")

    def scripted(self, name: str, tasks: Sequence[Task]) -> ScriptedReply:
        """A scripted policy by name (``--policy scripted:NAME``)."""
        raise ValueError(f"this family has no scripted policies (asked for {name!r})")
