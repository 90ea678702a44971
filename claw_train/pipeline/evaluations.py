"""Held-out evaluations during a run, on schedule (``--eval-every`` / ``--eval-at``): the serving policy through
the generic evaluator and the family's extension, each row recorded in ``evals.jsonl``, the logs and the output."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from claw_envs import FamilySpec
from claw_train.options.families import env_kwargs_for, tasks_for
from claw_train.options.tree import EvalConfig, RolloutConfig
from claw_train.pipeline.rundir import RunDir
from claw_train.policy.base import Policy, SamplingParams
from claw_train.runlog.logs import VersionedLog
from claw_train.runlog.metrics import Stats


@dataclass(frozen=True)
class EvalSchedule:
    """Which versions are evaluated: exactly those in ``at``, else every ``every`` updates (0: never)."""

    every: int = 0
    at: tuple[int, ...] = ()

    def includes(self, step: int) -> bool:
        """Whether version ``step`` is on the schedule."""
        if self.at:
            return step in self.at
        return bool(self.every) and step % self.every == 0


class Evaluations:
    """The run's evaluations: :meth:`due` and :meth:`run`; ``rows`` holds every row so far (a resumed run's
    earlier ones included)."""

    def __init__(
        self,
        schedule: EvalSchedule,
        config: EvalConfig,
        *,
        spec: FamilySpec,
        rollout: RolloutConfig,
        policy: Policy,
        sampling: SamplingParams,
        stats: Stats,
        rundir: RunDir,
        log: VersionedLog,
        say: Callable[[str], None],
        rows: Sequence[dict[str, Any]] = (),
    ):
        self.schedule = schedule
        self.config = config
        self.spec = spec
        self.rollout = rollout
        self.policy = policy
        self.sampling = sampling
        self.stats = stats
        self.rundir = rundir
        self.log = log
        self.say = say
        self.rows: list[dict[str, Any]] = list(rows)

    def due(self, step: int) -> bool:
        """Whether version ``step`` is due for a held-out evaluation (not yet evaluated, and on the schedule)."""
        return self.schedule.includes(step) and not any(e["update"] == step for e in self.rows)

    async def run(self, step: int) -> None:
        """Evaluate the serving policy (version ``step``) on held-out tasks; record and print the row."""
        from claw_train.evaluation import evaluate, extension_for
        from claw_train.evaluation.runner import env_options

        ev = self.config
        kwargs = env_kwargs_for(self.spec, self.rollout)
        extension = extension_for(self.spec, env_options(self.spec, kwargs))
        report = await evaluate(
            self.policy,
            self.spec,
            tasks_for(self.spec, self.rollout.tasks, ev.eval_split),
            n=ev.eval_n,
            k=ev.eval_k,
            seed=ev.eval_seed,
            sampling=dataclasses.replace(self.sampling, seed=ev.eval_seed, temperature=ev.eval_temperature),
            extension=extension,
            env_kwargs=kwargs,
        )
        names = {"score_name": extension.score_name, "success_name": extension.success_name}
        row = {"update": step, "version": self.policy.version, **names, **report.summary}
        self.rows.append(row)
        self.stats.evaluated(row)
        self.rundir.add_eval(row)
        self.log.write(step, {"kind": "eval", **row})
        for record in report.records:  # each held-out episode with its chat: what claw-view compares across versions
            self.log.write(step, {"kind": "eval_episode", "update": step, **record})
        self.say(eval_line(row))


def eval_line(row: dict[str, Any]) -> str:
    """One evaluation as a line of the run's output, named as the family names its score and its success."""
    name = row.get("score_name", "score")
    text = f"update {row['update']:>3}  held-out {name} {row['score']:.3f} ± {row['score_sd']:.3f}"
    text += f"  {row.get('success_name', 'success')} {row['success_rate']:.0%}"
    if "valid_rate" in row:
        text += f"  valid {row['valid_rate']:.0%}  correct {row['correct_rate']:.0%}"
    if "accepted_rate" in row:
        text += f"  accepted {row['accepted_rate']:.0%}"
    return text
