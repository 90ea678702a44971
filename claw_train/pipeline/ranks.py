"""The pipeline across processes (:mod:`claw_train.training.distributed`): rank 0 leads, every other rank follows.

Rank 0 runs the whole pipeline. Once it has resolved the model and the checkpoint to resume from it tells the
other ranks (:meth:`RankLink.go`); each builds the same trainer and trains on its share of every step's samples,
publishing, logging and writing nothing of the run directory but its own RNG state in each checkpoint. A rank 0
that fails before training tells them why (:meth:`RankLink.turn_away`), so they exit instead of waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_train.pipeline.rundir import RunError
from claw_train.training.distributed import Ranks, RanksDisagree, join, sharded_weights, world_size


def refuse_sharded_weights() -> None:
    """Raise :class:`RunError` when the launch shards the weights (FSDP, ZeRO-3): rank 0 could not publish them."""
    if sharding := sharded_weights():
        raise RunError(
            f"{sharding} shards the weights, and claw-train publishes whole weights from rank 0 after every "
            "update; gathering them for publishing is not wired yet: launch with DDP (--multi_gpu) or DeepSpeed "
            "ZeRO-1/2, and --lora where the model does not fit"
        )


@dataclass(frozen=True)
class Word:
    """What rank 0 tells the other ranks before training: the model and checkpoint to build the trainer from, or
    why it stopped before training (``error``)."""

    model_path: str | None = None
    resume_from: Path | None = None
    error: str | None = None


class RankLink:
    """A pipeline's link to the launcher's other processes (``ranks`` is None when it runs alone)."""

    def __init__(self) -> None:
        self.ranks: Ranks | None = None
        self._told = False
        self._lock = threading.Lock()  # go (trainer thread) and turn_away (event loop) must not both send

    @property
    def follower(self) -> bool:
        """Whether this process is another rank than 0 (it follows rank 0's run)."""
        return self.ranks is not None and not self.ranks.main

    def join(self, options: Mapping[str, Any], samples_per_step: int, say: Callable[[str], None]) -> None:
        """Join the other processes (blocking; nothing when alone) and check they run the same ``options``."""
        refuse_sharded_weights()
        if world_size() == 1:
            return
        try:
            self.ranks = join()
            self.ranks.check_same(dict(options))
        except RanksDisagree as err:
            raise RunError(str(err)) from None
        if samples_per_step % self.ranks.world_size:
            raise RunError(
                f"--samples-per-step {samples_per_step} cannot be shared out evenly across "
                f"{self.ranks.world_size} processes; give a multiple of {self.ranks.world_size}"
            )
        if self.ranks.main:
            say(f"rank 0 of {self.ranks.world_size}: rollouts, judges, logs and checkpoints run here")

    def go(self, model_path: str | None, resume_from: Path | None) -> None:
        """Rank 0: tell the other ranks to build the trainer from ``model_path`` (and ``resume_from``)."""
        with self._lock:
            if self.ranks is not None and not self._told:
                self._told = True
                self.ranks.share({"model_path": model_path, "resume_from": str(resume_from) if resume_from else None})

    def turn_away(self, message: str) -> None:
        """Rank 0 stops before training: the other ranks exit with ``message`` (no-op once they were told)."""
        with self._lock:
            if self.ranks is not None and not self._told:
                self._told = True
                self.ranks.share({"error": message})

    def await_word(self) -> Word:
        """Another rank: wait (blocking) for rank 0's :meth:`go` or :meth:`turn_away`."""
        assert self.ranks is not None, "only a rank of several waits for rank 0"
        word: dict[str, Any] = self.ranks.share()
        if "error" in word:
            return Word(error=word["error"])
        return Word(word["model_path"], Path(word["resume_from"]) if word["resume_from"] else None)
