"""Where a run's checkpoints are: the newest complete one, and the update each was taken after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def last_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (one a kill interrupted mid-save has no trainer state)."""
    done = [p for p in root.glob("checkpoint-*") if p.name[11:].isdigit() and read_json(p / "trainer_state.json")]
    return max(done, key=checkpoint_step, default=None)


def checkpoint_step(path: Path) -> int:
    """The update a checkpoint directory was taken after."""
    return int(path.name.rsplit("-", 1)[-1])


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON in ``path`` (``None`` when it is missing or unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
