"""Watchers that end a run instead of letting it hang: a worker that failed, a run that yields no signal."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline


async def watch_for_signal(p: Pipeline, limit: float) -> None:
    """Stop ``p`` (with a checkpoint) when no turn has become a trainable sample for ``limit`` seconds."""
    seen, since = -1, time.monotonic()
    while not p.closed.is_set():
        await asyncio.sleep(min(5.0, limit / 10))
        samples = p.stats.snapshot()["counts"].get("samples", 0)
        if samples != seen:
            seen, since = samples, time.monotonic()
        elif time.monotonic() - since >= limit:
            masked = ", ".join(f"{k} {v}" for k, v in sorted(p.stats.snapshot()["masked"].items())) or "none"
            p.request_stop(
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
