"""claw-train across processes: ``accelerate launch`` (or ``torchrun``) starts N copies of the same command.

Rank 0 runs the whole pipeline (serving, rollouts, judges, run directory, logs, checkpoints, weight publishing);
every rank, rank 0 included, trains: each optimizer step rank 0 takes ``samples_per_step`` samples and shares them
out, and DDP (accelerate, set up by TRL's trainer) averages the gradients, so N processes make the same update as
one process on the same samples. Objects (options, the handshake, the samples) travel over a gloo group beside
the training backend (gloo on CPU, NCCL on GPUs).

Bad input: ranks started with different options stop at once, every rank naming the options that differ; a rank
that dies breaks the others' next collective (gloo sees the closed connection) and the launcher stops the rest,
with every checkpoint already written kept.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# how long a rank waits for rank 0's next batch: rollouts of a large model may take long; a dead rank 0 is seen
# sooner (its connection closes)
SAMPLE_WAIT = timedelta(hours=24)


class RanksDisagree(RuntimeError):
    """The ranks of one run were started with different options."""


@dataclass
class Ranks:
    """This process's place in a multi-process run and the gloo group objects travel over."""

    rank: int
    world_size: int
    group: Any

    @property
    def main(self) -> bool:
        """Whether this is rank 0 (the one that runs the pipeline and writes the run directory)."""
        return self.rank == 0

    def share(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank (the others' argument is ignored); blocks until rank 0 sends it."""
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def check_same(self, options: dict[str, Any]) -> None:
        """Raise :class:`RanksDisagree` on every rank unless every rank has the same ``options``."""
        import torch.distributed as dist

        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, {k: repr(v) for k, v in options.items()}, group=self.group)
        names = sorted(set().union(*everyone))
        differ = [n for n in names if len({o.get(n) for o in everyone}) > 1]
        if differ:
            by_rank = (", ".join(f"rank {r} {o.get(n)}" for r, o in enumerate(everyone)) for n in differ)
            values = "; ".join(f"{n}: {ranks}" for n, ranks in zip(differ, by_rank, strict=True))
            raise RanksDisagree(
                f"the {self.world_size} processes were started with different options ({values}); "
                "start every rank with the same command line"
            )


def world_size() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def process_rank() -> int:
    """This process's rank (``RANK``; 0 without a launcher)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def sharded_weights() -> str | None:
    """The weight-sharding scheme ``accelerate launch`` set up (``FSDP``, ``DeepSpeed ZeRO-3``), or None (DDP,
    ZeRO-1/2 or one process: every rank holds the whole weights, so rank 0 can publish them)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true"):
        return "FSDP"
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    if deepspeed and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return "DeepSpeed ZeRO-3"
    return None


def join() -> Ranks | None:
    """Join the launcher's process group (None when running alone): the training backend through accelerate's
    ``PartialState``, plus a gloo group for objects."""
    if world_size() == 1:
        return None
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    group = dist.new_group(backend="gloo", timeout=SAMPLE_WAIT)
    atexit.register(leave)
    return Ranks(rank=state.process_index, world_size=state.num_processes, group=group)


def leave() -> None:
    """Leave the process group (run at exit by :func:`join`): gloo's worker threads must stop while the interpreter
    is still whole, or one may abort the process as it shuts down (``terminate called without an active
    exception``, SIGABRT: 16 of 40 two-rank runs of a small gloo script without it, 0 of 40 with it)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
