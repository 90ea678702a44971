"""Built models kept on disk: a folder is complete only once its marker file is written, builds run under a file
lock into a temporary folder that is renamed into place, so an interrupted build or a full disk never leaves a
half-written folder that a later run would take as complete."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cached_build(
    root: Path, name: str, build: Callable[[Path], Any], *, marker: str, record: dict[str, Any] | None = None
) -> Path:
    """``root/name`` if its ``marker`` exists; else ``build(tmp)`` under ``root/name.lock`` and rename ``tmp`` there.

    ``record`` (with the name and the build time) is what the marker holds.
    """
    final = root / name
    if (final / marker).exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / marker).exists():
            return final
        tmp = root / f"{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            build(tmp)
            (tmp / marker).write_text(json.dumps({"name": name, "built_at": time.time(), **(record or {})}, indent=2))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
