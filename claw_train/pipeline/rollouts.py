"""Turn sources that play env episodes: :class:`EnvRollouts` (the asynchronous rollout workers) and
:class:`SyncRounds` (roll out, judge, train — one after another, for comparison).

The personal track streams each turn to the judges as soon as the env has answered it; the agent track plays
``group_size`` episodes of one task and hands the group over whole (step-index normalisation needs it). Episodes
play in this process (:func:`~claw_train.pipeline.episodes.play_episode`) or on rollout workers of a Ray cluster
(:class:`~claw_train.pipeline.workers.RolloutWorkers`), whose turns reach the judges when their episode ends.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from claw_train.pipeline.episodes import Emit, play_episode
from claw_train.pipeline.workers import RolloutWorkers
from claw_train.policy.guarded import PolicyDown
from claw_train.records import TrainSample, TurnRecord

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline

Item = TurnRecord | list[list[TurnRecord]]


def turns_in(item: Item) -> int:
    """The turns in a personal-track turn (1) or an agent-track group of episodes."""
    return sum(len(ep) for ep in item) if isinstance(item, list) else 1


class EnvRollouts:
    """Episodes through the env pool, for the asynchronous pipeline and :class:`SyncRounds` alike."""

    def __init__(self, pipeline: Pipeline):
        self.p = pipeline
        self.episode_no = 0

    def start(self) -> list[asyncio.Task]:
        """The rollout workers (the pipeline starts the judge workers)."""
        return [asyncio.create_task(self.worker()) for _ in range(self.p.rollout.rollout_workers)]

    async def worker(self) -> None:
        """Once the policy serves, play episodes (or groups) and hand them to the judges until the run closes."""
        p = self.p
        await p.served.wait()
        while not p.closed.is_set():
            await asyncio.sleep(0)  # yield: an episode that fails at once never suspends, and would starve the loop
            if p.personal:
                await self.play(p.put_turn)
            else:
                await p.put_turn(await self.play_group())

    def next_seed(self) -> int:
        """A fresh episode seed from the pipeline's rng (and count the episode)."""
        self.episode_no += 1
        return int(self.p.rng.integers(0, 2**31 - 1))

    async def play(self, emit: Emit, *, group: str = "", options: dict[str, Any] | None = None) -> int:
        """One episode, here or on a rollout worker of the Ray cluster; each turn goes to ``emit``. Returns the
        number of turns. A lone episode takes in-flight slots; the episodes of a group play on their group's."""
        p = self.p
        seed = self.next_seed()
        where = dict(seed=seed, options=options, group_id=group or f"ep{p.attempt}-{seed}", emit=emit)
        budget = None if group else p.budget
        if isinstance(p.pool, RolloutWorkers):
            report = await p.pool.play(p.sampling, **where, budget=budget)
        else:
            report = await play_episode(p.pool, p.policy, p.sampling, **where, budget=budget)
        if (error := report.raised()) is not None:
            if isinstance(error, PolicyDown):
                p.request_stop("policy_failed", str(error))
            else:
                p.note_generation_error(error)
            return report.turns
        p.generation_failures = 0
        p.stats.add("episodes")
        if report.outcome is not None:
            p.stats.outcome(report.outcome)
        if report.status != "ok":
            p.stats.add(f"episodes_{report.status}")
            p.note_env_failure(report.error or report.status)
        else:
            p.note_env_success()
        return report.turns

    async def play_group(self) -> list[list[TurnRecord]]:
        """``group_size`` episodes of one task (its group for step-index normalisation)."""
        p = self.p
        task = p.tasks.sample(p.rng)
        group = f"g{p.attempt}-{self.episode_no}-{task.id}"
        episodes: list[list[TurnRecord]] = [[] for _ in range(p.training.group_size)]

        def collector(k: int) -> Emit:
            async def emit(turn: TurnRecord) -> None:
                episodes[k].append(turn)

            return emit

        options = {"task_id": task.id}
        allotment = await p.budget.take_allotment() if p.budget is not None else 0
        try:
            await asyncio.gather(*(self.play(collector(k), group=group, options=options) for k in range(len(episodes))))
        finally:  # the group's turns hold their slots until trained or masked; the rest are free now
            p.free(allotment - sum(len(e) for e in episodes))
        return [e for e in episodes if e]


class SyncRounds:
    """Roll out, then judge, then train — one after another, never overlapping (``--sync``)."""

    def __init__(self, pipeline: Pipeline):
        self.p = pipeline
        self.rollouts = EnvRollouts(pipeline)

    def start(self) -> list[asyncio.Task]:
        """The one task that runs the rounds."""
        return [asyncio.create_task(self.run())]

    async def run(self) -> None:
        """Once the policy serves, repeat rounds of roll out, judge and train until the run closes."""
        p = self.p
        await p.served.wait()
        pending: list[TrainSample] = []
        items: list[Item] = []

        async def collect(item: Item) -> None:
            items.append(item)
            p.stats.add("turns", turns_in(item))

        size = p.training.samples_per_step
        while not p.closed.is_set():
            items.clear()
            workers = range(p.rollout.rollout_workers)
            if p.personal:
                await asyncio.gather(*(self.rollouts.play(collect) for _ in workers))
            else:
                for g in await asyncio.gather(*(self.rollouts.play_group() for _ in workers)):
                    await collect(g)
            try:
                judged = await asyncio.gather(*(p.judge_item(i) for i in items))
            except PolicyDown as err:
                p.request_stop("policy_failed", str(err))
                return
            pending += [s for batch in judged for s in batch]
            while len(pending) >= size and not p.closed.is_set():
                step = p.trainer_step()
                pending = self.drop_untrainable(pending, step)
                if len(pending) < size:
                    break
                for s in pending[:size]:
                    await p.sample_q.put(s)
                pending = pending[size:]
                await p.wait_step(step + 1)

    def drop_untrainable(self, pending: list[TrainSample], step: int) -> list[TrainSample]:
        """The samples the trainer will take at ``step``, counting the rest where the trainer counts its own drops.

        Sync mode hands the trainer exactly one batch and waits for the step; a sample it would drop (too stale
        after the previous batches of a long round, or malformed) would leave it waiting forever.
        """
        trainer = self.p.trainer_thread.trainer
        keep = []
        for s in pending:
            verdict = trainer.triage(s, step)
            if verdict is None:
                keep.append(s)
            else:
                trainer.count(f"{verdict}_dropped")
        return keep
