"""Counters and recent windows of a run, shared by the pipeline's loops, its live display and its summary."""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter, deque
from typing import Any


class Stats:
    """Counters and recent windows the display and the summary read (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.masked: Counter[str] = Counter()
        self.scores: deque[float] = deque(maxlen=256)
        self.trained_total = 0
        self.train_started: float | None = None
        self.started = time.monotonic()
        self.version = 0
        self.staleness = 0.0
        self.last_eval: dict[str, Any] | None = None
        self.status = "starting"

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def mask(self, reason: str) -> None:
        with self._lock:
            self.masked[reason] += 1
            self.counts["masked"] += 1

    def score(self, value: float) -> None:
        with self._lock:
            self.scores.append(value)

    def trained(self, n: int) -> None:
        with self._lock:
            self.trained_total += n

    def samples_per_second(self) -> float:
        """Samples trained per second since the trainer started."""
        with self._lock:
            if self.train_started is None:
                return 0.0
            return self.trained_total / max(1e-9, time.monotonic() - self.train_started)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            judged = self.counts["judged"]
            return {
                "status": self.status,
                "elapsed": time.monotonic() - self.started,
                "counts": dict(self.counts),
                "masked": dict(self.masked),
                "mean_score": statistics.fmean(self.scores) if self.scores else None,
                "hint_rate": self.counts["hints"] / judged if judged else None,
                "version": self.version,
                "staleness": self.staleness,
                "last_eval": self.last_eval,
            }
