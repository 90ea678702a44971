"""What a run leaves when it ends: the learning curve (PNG) and ``summary.json``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from claw_train.pipeline.rundir import RunDir
from claw_train.runlog.metrics import Stats


def write_summary(
    rundir: RunDir,
    stats: Stats,
    *,
    status: str,
    message: str,
    updates: int,
    wall_time: float,
    evals: Sequence[dict[str, Any]],
    counters: dict[str, Any],
    checkpoint: Path | None,
    title: str,
    say: Callable[[str], None],
    success_name: str = "success",
) -> None:
    """The learning curve and ``summary.json`` of the run in ``rundir`` (``success_name``: what the family's
    evaluation calls an episode that succeeds, as the summary labels the success rate)."""
    from claw_train.runlog.plots import learning_curve

    out = rundir.root
    train_curve = [(u["update"], u.get("score_mean")) for u in rundir.ledger.effective()]
    try:
        learning_curve(out / "learning_curve.png", list(evals), train_curve, title=title)
    except Exception as err:  # a plot must not hide the run's result
        say(f"could not draw the learning curve: {err}")
    rundir.write_summary(
        {
            "status": status,
            "message": message,
            "updates": updates,
            "wall_time": round(wall_time, 1),
            "peak_memory_mb": peak_memory_mb(),
            **stats.totals(),
            "success_name": success_name,
            "paths": {
                "logs": str(out / "logs"),
                "ledger": str(rundir.ledger.path),
                "tensorboard": str(out / "tensorboard"),
                "learning_curve": str(out / "learning_curve.png"),
                "checkpoint": str(checkpoint) if checkpoint else None,
            },
            "evals": list(evals),
            "counters": counters,
            "checkpoint": str(checkpoint) if checkpoint else None,
        }
    )


def peak_memory_mb() -> int:
    """The largest resident memory of this process, or of a child process it waited for, so far (MB)."""
    import resource

    usage = (resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return max(usage) // 1024


def success_name(evaluation: str | None) -> str:
    """What the family's evaluation calls a success (its class's ``success_name``), read without building it."""
    from claw_envs.evaluation import Evaluation
    from claw_envs.spec import resolve

    try:
        return str(resolve(evaluation).success_name) if evaluation else Evaluation.success_name
    except (ImportError, AttributeError, ValueError):
        return Evaluation.success_name
