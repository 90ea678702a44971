"""The one interface every sandbox backend implements: run commands, read and write files."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self

RUN_THREADS = 64  # commands mostly wait on pipes, so many may block at once


@functools.cache
def _run_executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=RUN_THREADS, thread_name_prefix="claw-sandbox-run")


class SandboxError(Exception):
    """The sandbox itself failed or cannot start (an infrastructure failure, not the agent's)."""


@dataclass(frozen=True)
class ExecResult:
    """What one command did. ``truncated`` means stdout or stderr were cut to the output cap."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration: float = 0.0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """Whether the command exited 0 within its time limit."""
        return self.returncode == 0 and not self.timed_out


@dataclass(frozen=True)
class Bind:
    """A host folder shown at ``inside`` for one command only: read-only, or read-write when ``writable``."""

    host: str
    inside: str
    writable: bool = False


@dataclass(eq=False)
class Spawned:
    """A long-lived process started in a sandbox (:meth:`Sandbox.spawn`): ``proc`` has pipes on stdin, stdout
    and stderr; :meth:`kill` ends it with everything it started (safe to call twice)."""

    proc: subprocess.Popen
    _end: Callable[[], Any]
    _ended: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def kill(self) -> None:
        """End the process and everything it started, and reap it."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._end()

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return not self._ended and self.proc.poll() is None


class Sandbox:
    """A throw-away place where agent actions run. Use as a context manager or call ``close()``.

    ``workspace`` is the working directory as seen from inside the sandbox; ``python`` is the
    interpreter to call inside it; ``isolation`` names what separates it from the host.
    """

    workspace: str
    python: str = "python3"
    isolation: str = "none"

    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        *,
        binds: Sequence[Bind] = (),
    ) -> ExecResult:
        """Run ``cmd`` (a shell string or an argv list); never raises for what the command does. ``binds``
        show host folders inside for this command only (a backend that cannot raises :class:`SandboxError`)."""
        raise NotImplementedError

    async def arun(
        self,
        cmd: str | Sequence[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        *,
        binds: Sequence[Bind] = (),
    ) -> ExecResult:
        """``run`` without blocking the event loop (in a thread pool sized for many waiting commands)."""
        call = functools.partial(self.run, cmd, timeout, env, cwd, stdin, **({"binds": binds} if binds else {}))
        return await asyncio.get_running_loop().run_in_executor(_run_executor(), call)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> Spawned:
        """Start a long-lived process with piped stdin, stdout and stderr (a persistent shell); backends that
        cannot keep one open raise :class:`SandboxError`."""
        raise SandboxError(f"the {type(self).__name__} backend cannot keep a process open between commands")

    def host_folder(self, name: str, *, writable: bool = False) -> Any:
        """A host folder commands see only through ``binds`` (backends without binds raise :class:`SandboxError`)."""
        raise SandboxError(f"the {type(self).__name__} backend cannot show host folders to one command")

    def read_file(self, path: str) -> bytes:
        """Bytes of ``path`` (relative paths are inside the workspace)."""
        raise NotImplementedError

    def write_file(self, path: str, data: str | bytes) -> None:
        """Create or replace ``path`` (relative paths are inside the workspace)."""
        raise NotImplementedError

    def close(self) -> None:
        """Remove the sandbox and everything in it; safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
