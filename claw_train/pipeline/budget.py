"""The in-flight budget: how many turns may be generated but not yet trained (or masked), so samples stay within
``max_staleness`` policy versions of the trainer.

Every turn carries the :class:`Slot` it was generated under (``TurnRecord.slot``) and whoever ends its way through
the pipeline releases it, exactly once: the trainer when it takes the sample (trained, or dropped as stale or
malformed), the judge workers when they mask the turn, the run's close for what is still queued. A lone episode
(personal track) takes one slot per turn before generating it; a group of episodes (agent track) takes its whole
:class:`Allotment` — ``group_size x max_turns`` slots — at once, one group at a time, hands one to each turn it
plays and gives back what it did not use when it ends. Taking slots turn by turn would let several groups each hold
part of the budget while none could finish (a group is judged only when all its episodes end). The budget is at
least one allotment, so a group that has its slots can always finish.

The budget keeps its own books (:meth:`InFlightBudget.books`): slots taken, released, outstanding, and releases of
a slot already given back (counted and ignored, so a bookkeeping slip never widens the budget).
"""

from __future__ import annotations

import asyncio


class Slot:
    """One turn's place in the budget."""

    __slots__ = ("_budget", "_released")

    def __init__(self, budget: InFlightBudget):
        self._budget = budget
        self._released = False

    def release(self) -> None:
        """Give the slot back; a second call is counted as a double free and changes nothing."""
        if self._released:
            self._budget._double_freed()
            return
        self._released = True
        self._budget._give_back(1)


class Allotment:
    """A group's slots, taken at once: :meth:`slot` hands one to each turn, :meth:`close` gives back the rest."""

    def __init__(self, budget: InFlightBudget, size: int):
        self._budget = budget
        self._left = size

    def slot(self) -> Slot | None:
        """One of the allotment's slots for a turn (``None`` once they are all handed out: that turn holds none)."""
        if self._left <= 0:
            return None
        self._left -= 1
        return Slot(self._budget)

    def close(self) -> None:
        """Give back the slots no turn took (safe to call twice)."""
        left, self._left = self._left, 0
        self._budget._give_back(left)


class InFlightBudget:
    """``limit`` slots (raised to ``allotment`` when a group needs more)."""

    def __init__(self, limit: int, allotment: int = 0):
        self.allotment = allotment
        self.limit = max(limit, allotment)
        self._slots = asyncio.Semaphore(self.limit)
        self._group_gate = asyncio.Lock()
        self._taken = 0
        self._released = 0
        self._double_frees = 0

    async def take(self) -> Slot:
        """One slot for one turn (waits while the budget is spent)."""
        await self._slots.acquire()
        self._taken += 1
        return Slot(self)

    async def take_allotment(self) -> Allotment:
        """A whole group's slots at once (one group at a time)."""
        async with self._group_gate:
            got = 0
            try:
                for _ in range(self.allotment):
                    await self._slots.acquire()
                    got += 1
            except BaseException:  # cancelled while waiting: what was taken goes back
                for _ in range(got):
                    self._slots.release()
                raise
        self._taken += self.allotment
        return Allotment(self, self.allotment)

    @property
    def available(self) -> int:
        """Slots free right now."""
        return self.limit - (self._taken - self._released)

    def books(self) -> dict[str, int]:
        """Slots taken, released and outstanding so far, and releases of a slot already given back."""
        return {
            "taken": self._taken,
            "released": self._released,
            "outstanding": self._taken - self._released,
            "double_frees": self._double_frees,
        }

    def _give_back(self, n: int) -> None:
        for _ in range(n):
            self._released += 1
            self._slots.release()

    def _double_freed(self) -> None:
        self._double_frees += 1
