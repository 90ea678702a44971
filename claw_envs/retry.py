"""The one retry helper (here, at the bottom of the import direction, so that judges and claw_train share it):
call, and on a retryable error wait ``backoff * 2**k`` seconds (capped) and call again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def delay(attempt: int, backoff: float, cap: float = 8.0) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): exponential, at most ``cap``."""
    return min(backoff * 2**attempt, cap)


async def retry_async(
    call: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff: float,
    retry_on: Callable[[Exception], bool],
    cap: float = 8.0,
) -> T:
    """``await call()``; an error ``retry_on`` accepts is retried up to ``retries`` times, then re-raised."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except Exception as err:
            if attempt >= retries or not retry_on(err):
                raise
            await asyncio.sleep(delay(attempt, backoff, cap))
    raise AssertionError("unreachable")


def retry_sync(
    call: Callable[[], T],
    *,
    retries: int,
    backoff: float,
    retry_on: Callable[[Exception], bool],
) -> T:
    """The blocking form of :func:`retry_async` (weight updates in the trainer's thread)."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as err:
            if attempt >= retries or not retry_on(err):
                raise
            time.sleep(delay(attempt, backoff))
    raise AssertionError("unreachable")
