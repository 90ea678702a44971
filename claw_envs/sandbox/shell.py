"""``PersistentShell``: one long-lived bash in a sandbox, so ``cd``, variables and background jobs carry across
commands, the way a person at a terminal expects.

The shell is started with :meth:`Sandbox.spawn` and reads its commands from a pipe. Each command is sent as one
line, ``eval $'<command, every unsafe byte as \\xHH>' </dev/null`` followed by two ``printf`` calls that print a
random end marker (with the exit status and ``$PWD``) on stdout and on stderr; the output up to the markers is the
command's. The command's stdin is ``/dev/null``, so a program that reads input ends at once instead of eating the
next command.

A command that runs past its timeout has the shell killed with everything it started (background jobs too); a
shell that dies (``exit``, ``exec``, a kill, its CPU limit) is gone the same way. Either way the result's ``note``
says so and the next command starts a new shell in the last working directory: variables and background jobs
are lost, files are not. :meth:`close` kills the shell and everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import selectors
import shlex
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from claw_envs.sandbox.base import ExecResult, Sandbox, SandboxError, Spawned
from claw_envs.sandbox.output import CappedOutput

STDERR_GRACE = 1.0  # seconds to wait for the stderr marker once stdout's arrived (a command may have closed stderr)
MAX_MARKER_LINE = 8192  # the stdout marker line holds the exit status and $PWD
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./,:=+@%^")


@dataclass(frozen=True)
class ShellRun:
    """One command's result, and ``note``: what happened to the shell (``None``: it lives on unchanged)."""

    result: ExecResult
    note: str | None = None


def ansi_c_quote(text: str) -> str:
    """``text`` as a bash ``$'...'`` word on one line: every byte outside a small safe set written ``\\xHH``."""
    data = text.encode("utf-8", errors="surrogatepass")
    return "$'" + "".join(chr(b) if b in _SAFE else f"\\x{b:02x}" for b in data) + "'"


class _Stream:
    """One output stream of the shell up to this command's end marker; bytes after it are kept for the next."""

    def __init__(self, limit: int, marker: bytes, carried: bytes):
        self.out = CappedOutput(limit)
        self.marker = marker
        self.pending = bytearray()
        self.trailer: bytes | None = None
        self.rest = b""
        self.feed(carried)

    def feed(self, chunk: bytes) -> None:
        if self.trailer is not None:
            self.rest += chunk
            return
        self.pending += chunk
        at = self.pending.find(self.marker)
        if at >= 0:
            end = self.pending.find(b"\n", at + len(self.marker))
            if end < 0 and len(self.pending) - at < MAX_MARKER_LINE:
                return  # the rest of the marker line is still coming
            end = len(self.pending) if end < 0 else end
            self.out.feed(bytes(self.pending[:at]))
            self.trailer = bytes(self.pending[at + len(self.marker) : end])
            self.rest = bytes(self.pending[end + 1 :])
            self.pending.clear()
            return
        keep = len(self.marker) - 1
        if len(self.pending) > keep:
            self.out.feed(bytes(self.pending[: len(self.pending) - keep]))
            del self.pending[: len(self.pending) - keep]

    def flush(self) -> None:
        """No marker is coming (the shell died or was killed): everything held back is output."""
        if self.trailer is None:
            self.out.feed(bytes(self.pending))
            self.pending.clear()


class PersistentShell:
    """A bash that lives as long as this object (see the module docstring). ``env`` is its environment on top of
    the sandbox's; ``output_limit`` caps each stream of a command's output (head and tail kept)."""

    def __init__(self, sandbox: Sandbox, *, env: Mapping[str, str] | None = None, output_limit: int = 65536):
        self.sandbox = sandbox
        self.env = dict(env or {})
        self.output_limit = output_limit
        self.cwd: str | None = None  # the last working directory a command left (restored in a new shell)
        self.restarts = 0  # shells lost to a timeout or an exit so far
        self._spawned: Spawned | None = None
        self._carried = {"stdout": b"", "stderr": b""}
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        """Whether a shell is running now (a new one starts with the next command when not)."""
        return self._spawned is not None and self._spawned.alive

    def run(self, command: str, timeout: float = 30.0) -> ShellRun:
        """Run ``command`` in the shell for at most ``timeout`` seconds; never raises for what the command does
        (:class:`SandboxError` only when no shell can be started)."""
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        with self._lock:
            spawned = self._spawned if self.alive else self._start()
            nonce = uuid.uuid4().hex
            line = (
                f'eval {ansi_c_quote(command)} </dev/null; printf \'\\n{nonce} %d %s\\n\' "$?" "$PWD"; '
                f"printf '\\n{nonce}\\n' >&2\n"
            ).encode()
            marker = f"\n{nonce}".encode()
            return self._exchange(spawned, line, marker, timeout)

    async def arun(self, command: str, timeout: float = 30.0) -> ShellRun:
        """:meth:`run` without blocking the event loop."""
        return await asyncio.to_thread(self.run, command, timeout)

    def close(self) -> None:
        """Kill the shell and everything it started; safe to call twice."""
        with self._lock:
            self._end()

    # -- internals -----------------------------------------------------------------------------

    def _start(self) -> Spawned:
        self._end()
        spawned = self.sandbox.spawn(["/bin/bash", "--noprofile", "--norc"], env=self.env)
        init = "shopt -s expand_aliases; set +o history 2>/dev/null"
        if self.cwd:
            init += f"; cd -- {shlex.quote(self.cwd)} 2>/dev/null"
        self._spawned = spawned
        self._carried = {"stdout": b"", "stderr": b""}
        _write_all(spawned, (init + "\n").encode(), time.monotonic() + 10)
        return spawned

    def _end(self) -> None:
        if self._spawned is not None:
            spawned, self._spawned = self._spawned, None
            spawned.kill()

    def _exchange(self, spawned: Spawned, line: bytes, marker: bytes, timeout: float) -> ShellRun:
        """Send one command line and read both streams up to their markers, the deadline, or the shell's end."""
        start = time.monotonic()
        deadline = start + timeout
        proc = spawned.proc
        streams = {
            proc.stdout: _Stream(self.output_limit, marker, self._carried["stdout"]),
            proc.stderr: _Stream(self.output_limit, marker, self._carried["stderr"]),
        }
        out, err = streams[proc.stdout], streams[proc.stderr]
        if not _write_all(spawned, line, deadline):
            return self._lost(spawned, out, err, start, timeout, timed_out=time.monotonic() >= deadline)
        sel = selectors.DefaultSelector()
        for stream in streams:
            sel.register(stream, selectors.EVENT_READ, streams[stream])
        stdout_done_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return self._lost(spawned, out, err, start, timeout, timed_out=True)
                if stdout_done_at is not None and (err.trailer is not None or now - stdout_done_at > STDERR_GRACE):
                    break
                for key, _ in sel.select(min(0.05, deadline - now)):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        if key.fileobj is proc.stdout:
                            return self._lost(spawned, out, err, start, timeout, timed_out=False)
                        sel.unregister(key.fileobj)
                        continue
                    key.data.feed(chunk)
                if stdout_done_at is None and out.trailer is not None:
                    stdout_done_at = time.monotonic()
        finally:
            sel.close()
        self._carried = {"stdout": out.rest, "stderr": err.rest}
        code, cwd = _parse_trailer(out.trailer or b"")
        self.cwd = cwd or self.cwd
        err.flush()
        result = ExecResult(
            returncode=code,
            stdout=out.out.text(),
            stderr=err.out.text(),
            duration=time.monotonic() - start,
            truncated=out.out.truncated or err.out.truncated,
        )
        return ShellRun(result)

    def _lost(
        self, spawned: Spawned, out: _Stream, err: _Stream, start: float, timeout: float, *, timed_out: bool
    ) -> ShellRun:
        """The shell timed out or died during a command: end it and say so."""
        code = 137 if timed_out else _exit_status(spawned)
        spawned.kill()
        self._spawned = None
        self.restarts += 1
        for stream in (out, err):
            stream.flush()
        where = f" in {self.cwd}" if self.cwd else ""
        if timed_out:
            what = "the shell was killed with everything it started"
        else:
            what = f"the shell itself exited (status {code}: an `exit`, an `exec` or a kill ends it)"
        note = (
            f"[{what}; a new shell starts with your next command{where}: variables, functions and background jobs "
            "are gone, files are kept]"
        )
        result = ExecResult(
            returncode=code,
            stdout=out.out.text(),
            stderr=err.out.text(),
            timed_out=timed_out,
            duration=time.monotonic() - start,
            truncated=out.out.truncated or err.out.truncated,
        )
        return ShellRun(result, note)


def _write_all(spawned: Spawned, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the shell's stdin before ``deadline``; ``False`` when the shell is gone or stuck."""
    stdin = spawned.proc.stdin
    if stdin is None:
        raise SandboxError("the shell has no stdin pipe")
    fd = stdin.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_WRITE)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not sel.select(min(remaining, 0.05)):
                continue
            try:
                view = view[os.write(fd, view[: 1 << 16]) :]
            except BlockingIOError:
                continue
            except OSError:
                return False
    return True


def _exit_status(spawned: Spawned) -> int:
    with contextlib.suppress(Exception):
        code = spawned.proc.wait(timeout=1)
        return code if code >= 0 else 128 - code
    return 137


def _parse_trailer(trailer: bytes) -> tuple[int, str | None]:
    """``(exit status, $PWD)`` from the stdout marker line's tail ``" <status> <pwd>"``."""
    m = re.fullmatch(rb" (\d+) (.*)", trailer, re.S)
    if m is None:
        return 1, None
    return int(m[1]), m[2].decode("utf-8", errors="replace") or None
