"""The turn queue between the turn sources and the judge workers, and what travels on it: a lone turn (personal
track) or a group of episodes of one task (agent track)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from claw_train.runlog.metrics import Stats
from claw_train.samples.records import TurnRecord

Item = TurnRecord | list[list[TurnRecord]]


def turns_of(item: Item) -> Iterator[TurnRecord]:
    """The turns in a lone turn or a group of episodes."""
    if isinstance(item, list):
        for episode in item:
            yield from episode
    else:
        yield item


def turns_in(item: Item) -> int:
    """How many turns ``item`` holds."""
    return sum(len(ep) for ep in item) if isinstance(item, list) else 1


def release_item(item: Item) -> None:
    """Give back the in-flight slots of every turn in ``item`` (those not already given back)."""
    for turn in turns_of(item):
        turn.release_slot()


class TurnQueue:
    """A bounded queue of items for the judges; ``put`` counts the turns, and an item that never gets on it
    (the put was cancelled, the queue was full) gives its slots back."""

    def __init__(self, maxsize: int, stats: Stats):
        self._queue: asyncio.Queue[Item] = asyncio.Queue(maxsize)
        self.stats = stats

    async def put(self, item: Item) -> None:
        """Hand ``item`` to the judges (waits while they are behind)."""
        self.stats.add("turns", turns_in(item))
        try:
            await self._queue.put(item)
        except BaseException:
            release_item(item)
            raise

    def offer(self, item: Item) -> bool:
        """Hand ``item`` on only if there is room now (serving never waits for the judges); ``False`` if not."""
        self.stats.add("turns", turns_in(item))
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            release_item(item)
            return False
        return True

    async def get(self) -> Item:
        """The next item (waits for one)."""
        return await self._queue.get()

    def qsize(self) -> int:
        """Items waiting."""
        return self._queue.qsize()

    def drain(self) -> int:
        """Take every waiting item off the queue and give back its slots (the run is closing); returns how many."""
        n = 0
        while not self._queue.empty():
            release_item(self._queue.get_nowait())
            n += 1
        return n
