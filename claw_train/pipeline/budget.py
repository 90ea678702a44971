"""The in-flight budget: how many turns may be generated but not yet trained (or masked), so samples stay within
``max_staleness`` policy versions of the trainer.

A lone episode (personal track) takes one slot per turn; a group of episodes (agent track) takes its whole
allotment — ``group_size x max_turns`` slots — at once, one group at a time, and gives back what it did not use
when it ends. Taking slots turn by turn would let several groups each hold part of the budget while none could
finish (a group is judged only when all its episodes end). The budget is at least one allotment, so a group that
has its slots can always finish. Slots come back when a turn is trained or masked.
"""

from __future__ import annotations

import asyncio


class InFlightBudget:
    """``limit`` slots (raised to ``allotment`` when a group needs more)."""

    def __init__(self, limit: int, allotment: int = 0):
        self.allotment = allotment
        self.limit = max(limit, allotment)
        self._slots = asyncio.Semaphore(self.limit)
        self._group_gate = asyncio.Lock()

    async def take(self) -> None:
        """One slot for one turn (waits while the budget is spent)."""
        await self._slots.acquire()

    async def take_allotment(self) -> int:
        """A whole group's slots at once (one group at a time); returns how many were taken."""
        async with self._group_gate:
            for _ in range(self.allotment):
                await self._slots.acquire()
        return self.allotment

    def free(self, n: int = 1) -> None:
        """Give back ``n`` slots (turns trained, masked, or never played)."""
        for _ in range(max(0, n)):
            self._slots.release()

    @property
    def available(self) -> int:
        """Slots free right now."""
        return self._slots._value
