"""Turn sources that play env episodes: :class:`EnvRollouts` (the asynchronous rollout workers) and
:class:`SyncRounds` (roll out, judge, train — one after another, for comparison).

The personal track streams each turn to the judges as soon as the env has answered it; the agent track plays
``group_size`` episodes of one task and hands the group over whole (step-index normalisation needs it). Episodes
play wherever the run's :class:`~claw_train.pipeline.episode_runner.EpisodeRunner` plays them: in this process, or on
rollout workers of a Ray cluster, whose turns reach the judges when their episode ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from claw_envs import FamilySpec
from claw_envs.tasks import TaskSource
from claw_train.options.families import env_kwargs_for, max_turns_of
from claw_train.options.tree import RolloutConfig, TrainingConfig
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.episode_runner import Emit, EpisodeRunner
from claw_train.pipeline.failures import FailureMonitor
from claw_train.pipeline.turns import Item, TurnQueue, release_item, turns_in
from claw_train.policy.base import SamplingParams
from claw_train.policy.guarded import PolicyDown
from claw_train.runlog.metrics import Counters, Stats
from claw_train.samples.records import TrainSample, TurnRecord, triage


@dataclass(frozen=True)
class RolloutShape:
    """How a run rolls out: lone episodes (personal track) or groups of ``group_size`` episodes of one task, with
    ``workers`` episodes or groups in flight; ``attempt`` names the run's attempt in episode and group ids."""

    personal: bool
    group_size: int
    workers: int
    attempt: int = 0


def in_flight_budget(
    training: TrainingConfig, rollout: RolloutConfig, spec: FamilySpec, *, lone_turns: bool
) -> InFlightBudget:
    """At most ``samples_per_step x in_flight_batches`` turns between generation and training (so samples stay
    within max_staleness versions); ``lone_turns``: the personal track playing here, one slot per turn; else at
    least one whole allotment — a group's (agent track), or an episode's on a Ray rollout worker (it hands its turns
    over when it ends)."""
    limit = training.samples_per_step * training.in_flight_batches
    if lone_turns:
        return InFlightBudget(limit)
    max_turns = rollout.max_turns or env_kwargs_for(spec, rollout).get("max_turns")
    max_turns = int(max_turns or max_turns_of(spec, rollout))
    if spec.track == "personal":
        return InFlightBudget(limit, max_turns)
    return InFlightBudget(limit, (training.group_size or 1) * max_turns)


class EnvRollouts:
    """Episodes through the run's episode runner, for the asynchronous pipeline and :class:`SyncRounds` alike."""

    def __init__(
        self,
        runner: EpisodeRunner,
        shape: RolloutShape,
        *,
        turns: TurnQueue,
        control: RunControl,
        failures: FailureMonitor,
        stats: Stats,
        sampling: SamplingParams,
        rng: np.random.Generator,
        tasks: TaskSource | None,
        budget: InFlightBudget | None,
    ):
        self.runner = runner
        self.shape = shape
        self.turns = turns
        self.control = control
        self.failures = failures
        self.stats = stats
        self.sampling = sampling
        self.rng = rng
        self.tasks = tasks
        self.budget = budget
        self.episode_no = 0

    def start(self) -> list[asyncio.Task]:
        """The rollout workers (the pipeline starts the judge workers)."""
        return [asyncio.create_task(self.worker()) for _ in range(self.shape.workers)]

    async def worker(self) -> None:
        """Once the policy serves, play episodes (or groups) and hand them to the judges until the run closes."""
        await self.control.served.wait()
        while not self.control.stopping:
            await asyncio.sleep(0)  # yield: an episode that fails at once never suspends, and would starve the loop
            if self.shape.personal:
                await self.play(self.turns.put)
            else:
                await self.turns.put(await self.play_group())

    def next_seed(self) -> int:
        """A fresh episode seed from the run's rng (and count the episode)."""
        self.episode_no += 1
        return int(self.rng.integers(0, 2**31 - 1))

    async def play(self, emit: Emit, *, group: str = "", options: dict[str, Any] | None = None) -> int:
        """One episode; each turn goes to ``emit``. Returns the number of turns. A lone episode takes in-flight slots
        as it plays; the episodes of a group play on their group's allotment."""
        seed = self.next_seed()
        report = await self.runner.play_episode(
            self.sampling,
            seed=seed,
            options=options,
            group_id=group or f"ep{self.shape.attempt}-{seed}",
            emit=emit,
            budget=None if group else self.budget,
        )
        if (error := report.raised()) is not None:
            if isinstance(error, PolicyDown):
                self.control.request_stop("policy_failed", str(error))
            else:
                self.failures.generation_failed(error)
            return report.turns
        self.failures.generation_succeeded()
        self.stats.add("episodes")
        if report.outcome is not None:
            self.stats.outcome(report.outcome)
        if report.status != "ok":
            self.stats.add(f"episodes_{report.status}")
            self.failures.env_failed(report.error or report.status)
        else:
            self.failures.env_succeeded()
            self.failures.episode_played(report.acted)
        return report.turns

    async def play_group(self) -> list[list[TurnRecord]]:
        """``group_size`` episodes of one task (its group for step-index normalisation), each turn holding one of
        the group's slots; the group's unused slots go back when it ends."""
        task = self.tasks.sample(self.rng)
        group = f"g{self.shape.attempt}-{self.episode_no}-{task.id}"
        episodes: list[list[TurnRecord]] = [[] for _ in range(self.shape.group_size)]
        allotment = await self.budget.take_allotment() if self.budget is not None else None

        def collector(k: int) -> Emit:
            async def emit(turn: TurnRecord) -> None:
                turn.hold(allotment.slot() if allotment is not None else None)
                episodes[k].append(turn)

            return emit

        options = {"task_id": task.id}
        try:
            await asyncio.gather(*(self.play(collector(k), group=group, options=options) for k in range(len(episodes))))
        except BaseException:  # cancelled mid-group: its turns never reach the judges
            release_item(episodes)
            raise
        finally:
            if allotment is not None:
                allotment.close()
        return [e for e in episodes if e]


class SyncRounds:
    """Roll out, then judge, then train — one after another, never overlapping (``--sync``)."""

    def __init__(
        self,
        rollouts: EnvRollouts,
        judge: Callable[[Item], Awaitable[list[TrainSample]]],
        *,
        samples: asyncio.Queue[TrainSample],
        samples_per_step: int,
        max_staleness: int,
        drops: Counters,
    ):
        self.rollouts = rollouts
        self.judge = judge
        self.samples = samples
        self.samples_per_step = samples_per_step
        self.max_staleness = max_staleness
        self.drops = drops

    def start(self) -> list[asyncio.Task]:
        """The one task that runs the rounds."""
        return [asyncio.create_task(self.run())]

    async def run(self) -> None:
        """Once the policy serves, repeat rounds of roll out, judge and train until the run closes."""
        control, stats = self.rollouts.control, self.rollouts.stats
        await control.served.wait()
        pending: list[TrainSample] = []
        items: list[Item] = []

        async def collect(item: Item) -> None:
            items.append(item)
            stats.add("turns", turns_in(item))

        size = self.samples_per_step
        workers = range(self.rollouts.shape.workers)
        while not control.stopping:
            items.clear()
            if self.rollouts.shape.personal:
                await asyncio.gather(*(self.rollouts.play(collect) for _ in workers))
            else:
                for g in await asyncio.gather(*(self.rollouts.play_group() for _ in workers)):
                    await collect(g)
            try:
                judged = await asyncio.gather(*(self.judge(i) for i in items))
            except PolicyDown as err:
                control.request_stop("policy_failed", str(err))
                return
            pending += [s for batch in judged for s in batch]
            while len(pending) >= size and not control.stopping:
                step = control.step
                pending = self.drop_untrainable(pending, step)
                if len(pending) < size:
                    break
                for s in pending[:size]:
                    await self.samples.put(s)
                pending = pending[size:]
                await control.wait_step(step + 1)

    def drop_untrainable(self, pending: list[TrainSample], step: int) -> list[TrainSample]:
        """The samples the trainer will take at ``step``, counting the rest where the trainer counts its own drops.

        Sync mode hands the trainer exactly one batch and waits for the step; a sample it would drop (too stale
        after the previous batches of a long round, or malformed) would leave it waiting forever.
        """
        keep = []
        for s in pending:
            verdict, _ = triage(s, step, self.max_staleness)
            if verdict is None:
                keep.append(s)
            else:
                self.drops.add(f"{verdict}_dropped")
        return keep
