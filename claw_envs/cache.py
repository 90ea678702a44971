"""Things built once and kept on disk under a key: the task and instance virtualenvs of the families, the models of
claw_train. One way for all of them: a build runs under a file lock into a folder of its own, and is published in one
atomic step (the symlink ``root/key`` replaced to point at it), so an interrupted build or a full disk never leaves
anything that reads as complete, and what a build wrote never moves (a virtualenv's scripts name their own path).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive file lock on ``path`` (made if missing), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached(root: Path, key: str, build: Callable[[Path], None], *, complete: Callable[[Path], bool]) -> Path:
    """``root/key`` once ``complete`` says so of it; else ``build(folder)`` into a new folder under ``root/builds``
    (under the lock ``root/locks/key.lock``, so one process builds while the others wait) and point ``root/key`` at
    it. ``complete`` must hold of the new folder (the build writes its marker), or the build is an error. Builds of
    the key that nothing points at (a process died while building) are swept first; the folder a republished key
    pointed at before is removed after."""
    link = root / key
    if complete(link):
        return link
    with locked(root / "locks" / f"{key}.lock"):
        if complete(link):
            return link
        builds = root / "builds"
        builds.mkdir(parents=True, exist_ok=True)
        old = link.resolve() if link.is_symlink() else None
        for stale in builds.glob(f"{key}-*"):
            if stale != old:
                shutil.rmtree(stale, ignore_errors=True)
        folder = builds / f"{key}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()  # as the umask says (a private folder would shut a sandbox's user out of a virtualenv)
        try:
            build(folder)
            if not complete(folder):
                raise RuntimeError(f"the build of {key} finished without its completion marker")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        staged = root / f".{key}.{uuid.uuid4().hex[:8]}"
        os.symlink(folder, staged)
        if link.is_dir() and not link.is_symlink():  # an incomplete folder an older version of claw left there
            shutil.rmtree(link, ignore_errors=True)
        os.replace(staged, link)  # the commit: the key names a complete build, the old one or the new one
        if old is not None and old != folder:
            shutil.rmtree(old, ignore_errors=True)
    return link
