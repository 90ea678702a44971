"""What every part of a run shares: :class:`RunControl` (why and whether it stops, whether the trainer's weights
serve, the trainer's step) and :class:`LoopBridge`, the one way across between the event loop and the trainer's
thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from claw_train.runlog.metrics import Stats

T = TypeVar("T")


class LoopBridge:
    """Calls into the run's event loop from any thread (the trainer's, a worker's) or from the loop itself."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop

    def on_loop(self) -> bool:
        """Whether the caller runs on the loop's own thread."""
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the loop: at once from the loop itself (a task that never suspends would never run a
        scheduled callback), else scheduled; nothing once the loop has closed."""
        if self.on_loop():
            fn(*args)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    @property
    def closed(self) -> bool:
        """Whether the loop has closed (nothing crosses any more)."""
        return self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread only)."""
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("the event loop has closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


class RunControl:
    """A run's shared state, one owner for each piece: the stop reason (the first one wins) and the ``closed`` event
    it sets, ``served`` (the trainer's weights — a resumed run's checkpoint — are serving) and the trainer's step."""

    def __init__(self, stats: Stats, say: Callable[[str], None] = lambda text: None):
        self.stats = stats
        self.say = say
        self.stop_reason: tuple[str, str] | None = None
        self.closed = asyncio.Event()
        self.served = asyncio.Event()
        self.step = 0
        self._step_event = asyncio.Event()
        self.bridge: LoopBridge | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> LoopBridge:
        """Tie the control to the run's event loop; returns the bridge every other thread crosses by."""
        self.bridge = LoopBridge(loop)
        return self.bridge

    @property
    def stopping(self) -> bool:
        """Whether the run has been asked to stop."""
        return self.closed.is_set()

    def request_stop(self, status: str, message: str) -> None:
        """Stop the run (first reason wins): rollouts end, the trainer checkpoints and returns. Any thread."""
        if self.stop_reason is None:
            self.stop_reason = (status, message)
            self.stats.set_status(f"stopping: {message}")
            self.say(f"stopping: {message}")
        if self.bridge is not None:
            self.bridge.call(self.closed.set)

    def mark_served(self) -> None:
        """The trainer's weights serve now (any thread)."""
        if self.bridge is not None:
            self.bridge.call(self.served.set)

    def step_done(self, step: int) -> None:
        """The trainer has made optimizer step ``step`` (its thread): wake :meth:`wait_step`."""
        self.step = step
        if self.bridge is not None:
            self.bridge.call(self._step_event.set)

    async def wait_step(self, step: int) -> None:
        """Wait (no polling) until the trainer has made optimizer step ``step`` or the run stops."""
        while self.step < step and not self.closed.is_set():
            self._step_event.clear()
            if self.step >= step:
                return
            waits = [asyncio.ensure_future(self._step_event.wait()), asyncio.ensure_future(self.closed.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
