"""Progress of long work that reads well everywhere: a bar on a terminal, plain timed lines in a pipe or a log."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

PLAIN_EVERY = 10.0  # seconds between plain lines


class Progress:
    """``with Progress("bootstrap", total) as p: p.advance()`` — thread-safe; ``total`` may be 0 (unknown)."""

    def __init__(self, title: str, total: int, *, console: Console | None = None, every: float = PLAIN_EVERY):
        self.title = title
        self.total = total
        self.console = console or Console(stderr=True)
        self.every = every
        self.done = 0
        self._lock = threading.Lock()
        self._bar: Any = None
        self._job: Any = None
        self._started = 0.0
        self._last_line = 0.0
        self.note = ""

    def __enter__(self) -> Progress:
        self._started = self._last_line = time.monotonic()
        if self.console.is_terminal:
            from rich import progress as bars

            self._bar = bars.Progress(
                bars.TextColumn("{task.description}"),
                bars.BarColumn(),
                bars.MofNCompleteColumn(),
                bars.TimeElapsedColumn(),
                bars.TimeRemainingColumn(),
                console=self.console,
            )
            self._bar.__enter__()
            self._job = self._bar.add_task(self.title, total=self.total or None)
        else:
            self.console.print(f"{self.title}: started ({self.total or '?'} to do)", markup=False, highlight=False)
        return self

    def advance(self, n: int = 1, *, note: str = "") -> None:
        """Count ``n`` more units done (``note``: a short status such as the loss)."""
        with self._lock:
            self.done += n
            self.note = note or self.note
            if self._bar is not None:
                self._bar.update(self._job, advance=n, description=f"{self.title}  {self.note}".rstrip())
                return
            now = time.monotonic()
            if now - self._last_line >= self.every:
                self._last_line = now
                self.console.print(self.line(now), markup=False, highlight=False)

    def line(self, now: float | None = None) -> str:
        """``title: done/total (pct), elapsed, ETA`` as plain text."""
        elapsed = (now or time.monotonic()) - self._started
        text = f"{self.title}: {self.done}/{self.total or '?'}"
        if self.total:
            text += f" ({self.done / self.total:.0%})"
        text += f", elapsed {elapsed:.0f} s"
        if self.total and self.done:
            text += f", ETA {elapsed / self.done * (self.total - self.done):.0f} s"
        return f"{text}  {self.note}" if self.note else text

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        else:
            self.console.print(f"{self.line()} — done" if not exc[0] else self.line(), markup=False, highlight=False)


@contextlib.contextmanager
def optional_progress(enabled: bool, title: str, total: int) -> Iterator[Callable[[str], None]]:
    """``with optional_progress(show, title, total) as advance: advance(note)`` — a :class:`Progress`, or nothing."""
    if not enabled:
        yield lambda _note: None
        return
    with Progress(title, total) as bar:
        yield lambda note: bar.advance(note=note)
