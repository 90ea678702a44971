"""The judge workers: take items off the turn queue, judge them into training samples
(:class:`~claw_train.samples.making.SampleMaker`) and put those on the sample queue; masked turns give their in-flight
slots back here, trained ones when the trainer takes them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from claw_train.pipeline.control import RunControl
from claw_train.pipeline.turns import Item, TurnQueue, release_item, turns_of
from claw_train.policy.guarded import PolicyDown
from claw_train.runlog.metrics import Stats
from claw_train.samples.making import SampleMaker
from claw_train.samples.records import TrainSample

STARVED_AT = (100, 1000, 10000)  # masked turns with no sample yet at which the run says it waits for signal


class JudgeWorkers:
    """``judge(item)`` for any caller; :meth:`start` runs workers from the turn queue to the sample queue."""

    def __init__(
        self,
        maker: SampleMaker,
        *,
        turns: TurnQueue,
        samples: asyncio.Queue[TrainSample],
        control: RunControl,
        stats: Stats,
        say: Callable[[str], None],
    ):
        self.maker = maker
        self.turns = turns
        self.samples = samples
        self.control = control
        self.stats = stats
        self.say = say

    async def judge(self, item: Item) -> list[TrainSample]:
        """The training samples of a lone turn or a group of episodes; every turn that yields none gives its slot
        back now (so does every turn, should judging fail)."""
        try:
            samples = await (self.maker.group(item) if isinstance(item, list) else self.maker.personal(item))
        except BaseException:
            release_item(item)
            raise
        kept = {id(s.turn) for s in samples}
        for turn in turns_of(item):
            if id(turn) not in kept:
                turn.release_slot()
        return samples

    def start(self, n: int) -> list[asyncio.Task]:
        """``n`` workers judging from the turn queue."""
        return [asyncio.create_task(self._work()) for _ in range(n)]

    async def _work(self) -> None:
        while True:
            item = await self.turns.get()
            try:
                samples = await self.judge(item)
            except PolicyDown as err:  # the teacher prefill found the policy dead
                self.control.request_stop("policy_failed", str(err))
                return
            self._warn_if_starved()
            for k, sample in enumerate(samples):
                try:
                    await self.samples.put(sample)
                except BaseException:  # cancelled at close: these never reach the trainer
                    for rest in samples[k:]:
                        rest.turn.release_slot()
                    raise

    def _warn_if_starved(self) -> None:
        """Say so when many turns in a row were masked: training waits for signal, it has not hung."""
        snap = self.stats.snapshot()
        masked, samples = snap["counts"].get("masked", 0), snap["counts"].get("samples", 0)
        if samples == 0 and masked in STARVED_AT:
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(snap["masked"].items()))
            self.say(f"no trainable sample yet after {masked} turns (masked: {reasons}); training waits for signal")
