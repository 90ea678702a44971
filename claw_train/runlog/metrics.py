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
        self.score_total = [0.0, 0, 0]  # sum, count and positives of every judge score, for the summary
        self.outcomes = [0.0, 0, 0]  # sum, count and successes (outcome >= 1) of finished training episodes
        self.trained_total = 0
        self.episode_ids: set[str] = set()  # episodes with a logged turn (what the logs and claw-view count)
        self.train_started: float | None = None
        self.started = time.monotonic()
        self.version = 0
        self.staleness = 0.0
        self.last_eval: dict[str, Any] | None = None
        self.status = "starting"

    def add(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``key``."""
        with self._lock:
            self.counts[key] += n

    def logged(self, episode_id: str) -> None:
        """A turn of ``episode_id`` was logged with its decision."""
        with self._lock:
            self.episode_ids.add(episode_id)

    def mask(self, reason: str) -> None:
        """Count a turn masked (not trained on) for ``reason``."""
        with self._lock:
            self.masked[reason] += 1
            self.counts["masked"] += 1

    def score(self, value: float) -> None:
        """Record one judge score."""
        with self._lock:
            self.scores.append(value)
            self.score_total[0] += value
            self.score_total[1] += 1
            self.score_total[2] += value > 0

    def outcome(self, value: float) -> None:
        """A training episode ended with this outcome."""
        with self._lock:
            self.outcomes[0] += value
            self.outcomes[1] += 1
            self.outcomes[2] += value >= 1.0

    def totals(self) -> dict[str, Any]:
        """Whole-run figures for the summary, counted one way (the progress lines and claw-view count the same):
        ``episodes`` with a logged turn (``episodes_finished`` of them ended), ``turns`` played, ``turns_judged``
        decided (logged accepted or masked), ``turns_scored`` by the judge, ``hints`` the judge gave among those,
        ``samples`` accepted and ``samples_trained``; masking by reason, degenerate turns by kind (cut off, repetitive:
        penalised, dropped or kept as the run chose), mean judge score, episode outcomes."""
        with self._lock:
            (score_sum, scored, positive), (outcome_sum, ended, successes) = self.score_total, self.outcomes
            return {
                "episodes": len(self.episode_ids),
                "episodes_finished": self.counts["episodes"],
                "turns": self.counts["turns"],
                "episodes_idle": self.counts["episodes_idle"],
                "turns_judged": self.counts["samples"] + self.counts["masked"],
                "turns_scored": self.counts["judged"],
                "hints": self.counts["hints"],
                "samples": self.counts["samples"],
                "samples_trained": self.trained_total,
                "masked": dict(self.masked),
                "degenerate": {
                    k.removeprefix("degenerate_"): v for k, v in self.counts.items() if k[:11] == "degenerate_"
                },
                "mean_judge_score": score_sum / scored if scored else None,
                "judge_positive_rate": positive / scored if scored else None,
                "episodes_with_outcome": ended,
                "mean_outcome": outcome_sum / ended if ended else None,
                "success_rate": successes / ended if ended else None,
            }

    def set_status(self, text: str) -> None:
        """What the run is doing now (the display's status line)."""
        with self._lock:
            self.status = text

    def training_started(self, version: int) -> None:
        """The trainer starts (at ``version``: a resumed run's checkpoint): samples/s counts from now."""
        with self._lock:
            self.version = version
            self.train_started = time.monotonic()

    def published(self, version: int) -> None:
        """Weights of ``version`` are serving."""
        with self._lock:
            self.version = version

    def trained(self, n: int, staleness: float | None = None) -> None:
        """Count ``n`` samples trained on in one update, ``staleness`` versions behind it on average."""
        with self._lock:
            self.trained_total += n
            if staleness is not None:
                self.staleness = staleness

    def evaluated(self, row: dict[str, Any]) -> None:
        """The newest held-out evaluation."""
        with self._lock:
            self.last_eval = row

    def samples_per_second(self) -> float:
        """Samples trained per second since the trainer started."""
        with self._lock:
            if self.train_started is None:
                return 0.0
            return self.trained_total / max(1e-9, time.monotonic() - self.train_started)

    def snapshot(self) -> dict[str, Any]:
        """The live display's view: status, counts, masking, recent mean score, hint rate, version, staleness."""
        with self._lock:
            judged = self.counts["judged"]
            return {
                "status": self.status,
                "elapsed": time.monotonic() - self.started,
                "counts": dict(self.counts),
                "episodes_started": len(self.episode_ids),
                "masked": dict(self.masked),
                "mean_score": statistics.fmean(self.scores) if self.scores else None,
                "hint_rate": self.counts["hints"] / judged if judged else None,
                "version": self.version,
                "staleness": self.staleness,
                "last_eval": self.last_eval,
            }


TRAINER_COUNTERS = ("stale_dropped", "invalid_dropped", "nan_skipped", "trained")
"""What the trainer counts: samples dropped (stale, malformed), steps skipped (NaN), samples trained."""


class Counters:
    """Named counts that several threads add to (the trainer's drops and skips, and sync mode's)."""

    def __init__(self, *names: str) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(names, 0)

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to ``name``."""
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def as_dict(self) -> dict[str, int]:
        """A copy of every count."""
        with self._lock:
            return dict(self._counts)
