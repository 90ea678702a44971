"""The pipeline across processes (:mod:`claw_train.distributed`): rank 0 leads, every other rank follows.

Rank 0 runs the whole pipeline. Once it has resolved the model and the checkpoint to resume from it tells the
other ranks (:meth:`RankLink.go`); each builds the same trainer and trains on its share of every step's samples,
publishing, logging and writing nothing of the run directory but its own RNG state in each checkpoint. A rank 0
that fails before training tells them why (:meth:`RankLink.turn_away`), so they exit instead of waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_train.config import as_flat_dict
from claw_train.distributed import Ranks, RanksDisagree, join, sharded_weights, world_size
from claw_train.pipeline.rundir import RunError

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline, PipelineResult


def refuse_sharded_weights() -> None:
    """Raise :class:`RunError` when the launch shards the weights (FSDP, ZeRO-3): rank 0 could not publish them."""
    if sharding := sharded_weights():
        raise RunError(
            f"{sharding} shards the weights, and claw-train publishes whole weights from rank 0 after every "
            "update; gathering them for publishing is not wired yet: launch with DDP (--multi_gpu) or DeepSpeed "
            "ZeRO-1/2, and --lora where the model does not fit"
        )


class RankLink:
    """A pipeline's link to the launcher's other processes (``ranks`` is None when it runs alone)."""

    def __init__(self) -> None:
        self.ranks: Ranks | None = None
        self._told = False
        self._lock = threading.Lock()  # go (trainer thread) and turn_away (event loop) must not both send

    async def join(self, p: Pipeline) -> PipelineResult | None:
        """Join the other processes and check they run the same options; on another rank, its whole run (it
        trains on its share of rank 0's samples). None on rank 0 or alone."""
        refuse_sharded_weights()
        if world_size() == 1:
            return None
        try:
            self.ranks = await asyncio.to_thread(join)
            await asyncio.to_thread(self.ranks.check_same, as_flat_dict(p.args))
        except RanksDisagree as err:
            raise RunError(str(err)) from None
        if p.training.samples_per_step % self.ranks.world_size:
            raise RunError(
                f"--samples-per-step {p.training.samples_per_step} cannot be shared out evenly across "
                f"{self.ranks.world_size} processes; give a multiple of {self.ranks.world_size}"
            )
        if self.ranks.main:
            p.say(f"rank 0 of {self.ranks.world_size}: rollouts, judges, logs and checkpoints run here")
            return None
        return await asyncio.to_thread(self._follow, p)

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

    def _follow(self, p: Pipeline) -> PipelineResult:
        """Another rank's run: wait for rank 0's word, then train on this rank's share of each step."""
        from claw_train.pipeline.core import PipelineResult

        started = time.monotonic()
        rank = self.ranks.rank
        word: dict[str, Any] = self.ranks.share()
        if "error" in word:
            status, message = "error", f"rank 0 stopped before training: {word['error']}"
        else:
            p.model_path = word["model_path"]
            p.stats.status = f"rank {rank}: training on its share of rank 0's samples"
            resume_from = Path(word["resume_from"]) if word["resume_from"] else None
            status, message = p.trainer_thread.follow(resume_from)
        return PipelineResult(
            status=status,
            message=f"rank {rank}: {message}",
            updates=p.trainer_step(),
            wall_time=time.monotonic() - started,
            evals=[],
            counters={},
            output_dir=p.out,
            checkpoint=p.trainer_thread.checkpoint,
        )
