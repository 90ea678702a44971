"""Watchers that end a run instead of letting it hang or die silently: a worker that failed, a run that yields no
signal, Ctrl-C and SIGTERM (a checkpoint, then a clean stop)."""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
import time
from collections.abc import Callable

from claw_train.pipeline.control import RunControl
from claw_train.runlog.metrics import Stats


async def watch_for_signal(control: RunControl, stats: Stats, limit: float) -> None:
    """Stop the run (with a checkpoint) when no turn has become a trainable sample for ``limit`` seconds."""
    seen, since = -1, time.monotonic()
    while not control.stopping:
        await asyncio.sleep(min(5.0, limit / 10))
        samples = stats.snapshot()["counts"].get("samples", 0)
        if samples != seen:
            seen, since = samples, time.monotonic()
        elif time.monotonic() - since >= limit:
            masked = ", ".join(f"{k} {v}" for k, v in sorted(stats.snapshot()["masked"].items())) or "none"
            control.request_stop(
                "no_signal",
                f"no turn became a trainable sample in {limit:g} s (masked: {masked}); check the judge "
                "(--judge) and the env, or raise --max-wait-for-signal",
            )
            return


async def first_failure(tasks: list[asyncio.Task]) -> BaseException:
    """The first exception any worker raises (cancellation is not a failure); waits forever otherwise."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                return t.exception()
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def stop_on_signals(request_stop: Callable[[str, str], None]) -> Callable[[], None]:
    """Ctrl-C and SIGTERM (a supervisor stopping the run) both ask ``request_stop`` to checkpoint, then stop; returns
    the undo. Only the main thread's event loop can take signals: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    names = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
    try:
        for sig, name in names.items():
            loop.add_signal_handler(
                sig, functools.partial(request_stop, "interrupted", f"{name}: checkpointing, then exiting")
            )
    except (NotImplementedError, RuntimeError):
        return lambda: None

    def restore() -> None:
        for sig in names:
            loop.remove_signal_handler(sig)

    return restore
