"""Built models kept on disk: a folder is complete only once its marker file is written, and it is built and
published as every cache of claw is (:func:`claw_envs.cache.cached`: under a file lock, into a folder of its own,
then one atomic step), so an interrupted build or a full disk never leaves a half-written model a later run would
take as complete."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claw_envs.cache import cached


def cached_build(
    root: Path, name: str, build: Callable[[Path], Any], *, marker: str, record: dict[str, Any] | None = None
) -> Path:
    """``root/name`` once its ``marker`` exists; else ``build(folder)`` and the marker, published there.

    ``record`` (with the name and the build time) is what the marker holds.
    """

    def make(folder: Path) -> None:
        build(folder)
        (folder / marker).write_text(json.dumps({"name": name, "built_at": time.time(), **(record or {})}, indent=2))

    return cached(root, name, make, complete=lambda path: (path / marker).exists())
