"""Turn sources that play env episodes: :class:`EnvRollouts` (the asynchronous rollout workers) and
:class:`SyncRounds` (roll out, judge, train — one after another, for comparison).

The personal track streams each turn to the judges as soon as the env has answered it; the agent track plays
``group_size`` episodes of one task and hands the group over whole (step-index normalisation needs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from claw_train.pipeline.budget import InFlightBudget
from claw_train.policy.base import PolicyError
from claw_train.policy.guarded import PolicyDown
from claw_train.records import TrainSample, TurnRecord
from claw_train.rollout import EpisodeAgent

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline

Item = TurnRecord | list[list[TurnRecord]]
Emit = Callable[[TurnRecord], Awaitable[None]]


def turns_in(item: Item) -> int:
    """The turns in a personal-track turn (1) or an agent-track group of episodes."""
    return sum(len(ep) for ep in item) if isinstance(item, list) else 1


class StreamingAgent(EpisodeAgent):
    """An ``EpisodeAgent`` that hands each turn on as soon as the env has answered it; a lone episode takes an
    in-flight slot per turn (freed when the turn is trained or masked)."""

    def __init__(self, *args: Any, emit: Emit, budget: InFlightBudget | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.emit = emit
        self.budget = budget
        self.emitted = 0
        self.error: PolicyError | None = None

    async def flush(self) -> None:
        """Emit the turns not yet handed on, in order."""
        while self.emitted < len(self.turns):
            turn = self.turns[self.emitted]
            turn.info.setdefault("tools", self.transcript.tools if self.transcript else None)
            self.emitted += 1
            await self.emit(turn)

    async def __call__(self, obs: Any, info: Mapping[str, Any]) -> str:
        if self.transcript is not None:
            self.observe(0.0, info)
            await self.flush()
        if self.budget is not None:
            await self.budget.take()
        try:
            return await super().__call__(obs, info)
        except PolicyError as err:
            if self.budget is not None:
                self.budget.free(1)  # the turn that failed to generate holds no sample
            self.error = err
            raise


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
        """One episode through the pool; each turn goes to ``emit``. Returns the number of turns.

        A lone episode takes an in-flight slot per turn; the episodes of a group play on their group's allotment.
        """
        p = self.p
        seed = self.next_seed()
        budget = None if group else p.budget
        agent = StreamingAgent(
            p.policy, p.sampling, group_id=group or f"ep{p.attempt}-{seed}", emit=emit, budget=budget
        )
        result = await p.pool.run_episode(agent, seed=seed, options=options)
        if agent.error is not None:
            if isinstance(agent.error, PolicyDown):
                p.request_stop("policy_failed", str(agent.error))
            else:
                p.note_generation_error(agent.error)
            return len(agent.turns)
        p.generation_failures = 0
        if agent.pending:
            if len(result.infos) == len(result.actions) + 1:  # the reset info, then one per step
                agent.observe(result.rewards[-1] if result.rewards else 0.0, result.infos[-1])
            else:  # the env never answered this action (timeout, crash): recorded, then masked as infra
                agent.abandon(result.status if result.status != "ok" else "infra_failure")
        await agent.flush()
        p.stats.add("episodes")
        final = result.infos[-1].get("next_state") if result.infos else None
        if final is not None and final.outcome is not None:
            p.stats.outcome(final.outcome)
        if result.status != "ok":
            p.stats.add(f"episodes_{result.status}")
            p.note_env_failure(result.error or result.status)
        else:
            p.note_env_success()
        return len(agent.turns)

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
