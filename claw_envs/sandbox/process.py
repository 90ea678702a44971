"""Running one sandboxed process: the launcher prefix that sets its limits, feeding its stdin and reading its
output into capped buffers, and finding what it left behind."""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from claw_envs.sandbox.layout import SANDBOX_USER
from claw_envs.sandbox.limits import RunCgroup, apply_rlimits, prlimit_options
from claw_envs.sandbox.output import CappedOutput

CGROUP_JOIN_FAILED = "claw-sandbox: cannot join cgroup"
CGROUP_JOIN = (  # sh -c CGROUP_JOIN sh <cgroup.procs files...> -- <command...>
    f'while [ "$1" != -- ]; do echo $$ > "$1" || {{ echo "{CGROUP_JOIN_FAILED} $1" >&2; exit 125; }}; shift; done; '
    'shift; exec "$@"'
)
RUN_MARKER = "CLAW_SANDBOX_RUN"  # set in every command's environment; finds escaped processes without bwrap
EXIT_GRACE = 0.2  # seconds to wait for output pipes to close after the command itself exited
DRAIN_WAIT = 2.0  # seconds to keep reading after a kill
_CHUNK = 1 << 16
ARG_INLINE_MAX = 64 << 10  # longer shell commands are read from a memory file (one argument holds <= 128 KiB)


def launcher(
    rlimits: list[tuple[int, int, int]], cgroup: RunCgroup | None, prlimit: str | None
) -> tuple[list[str], Callable[[], None] | None]:
    """The command prefix that joins the cgroup and sets the rlimits, and a ``preexec_fn`` if needed.

    Small exec'd helpers (sh, prlimit) instead of a Python ``preexec_fn`` let ``subprocess`` use
    vfork, which saves a fork of this whole process per command.
    """
    prefix = []
    if cgroup is not None:
        prefix += ["/bin/sh", "-c", CGROUP_JOIN, "sh", *cgroup.procs_files(), "--"]
    if prlimit is None:
        return prefix, functools.partial(apply_rlimits, rlimits)
    return [*prefix, prlimit, *prlimit_options(rlimits), "--"], None


def communicate(
    proc: subprocess.Popen, timeout: float, data: bytes | None, output_limit: int, kill: Callable[[], None]
) -> tuple[CappedOutput, CappedOutput, bool]:
    """Feed stdin and read both streams until they close, the deadline passes, or the command
    exited and something it left behind still holds the pipes (then ``kill()`` it)."""
    out, err = CappedOutput(output_limit), CappedOutput(output_limit)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    pending = memoryview(data) if data else None
    if proc.stdin is not None and pending is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE)
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    killed_at: float | None = None
    timed_out = False
    try:
        while sel.get_map():
            now = time.monotonic()
            if killed_at is None and (now >= deadline or (exited_at and now - exited_at > EXIT_GRACE)):
                timed_out = now >= deadline and exited_at is None
                kill()
                killed_at = now
            if killed_at is not None and now - killed_at > DRAIN_WAIT:
                break
            for key, _events in sel.select(0.05):
                if key.fileobj is proc.stdin:
                    pending = _write_some(proc.stdin, pending)
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if chunk:
                    key.data.feed(chunk)
                else:
                    sel.unregister(key.fileobj)
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
    finally:
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    return out, err, timed_out


@contextlib.contextmanager
def memory_file(data: bytes | None) -> Iterator[tuple[int, ...]]:
    """``(fd,)`` of an anonymous in-memory file holding ``data``, closed after the block; ``()`` without data."""
    if data is None:
        yield ()
        return
    fd = os.memfd_create("claw-command", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as fh:
            fh.write(data)
        os.lseek(fd, 0, os.SEEK_SET)
        yield (fd,)
    finally:
        os.close(fd)


def _write_some(stream: object, pending: memoryview | None) -> memoryview | None:
    if not pending:
        return None
    try:
        written = os.write(stream.fileno(), pending[:_CHUNK])
    except BlockingIOError:
        return pending
    except (BrokenPipeError, OSError):
        return None
    return pending[written:]


def signal_marked(run_id: str, signum: int) -> bool:
    """Send ``signum`` to every process whose environment carries this run's marker; whether there was one."""
    needle = f"{RUN_MARKER}={run_id}".encode()
    found = False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            os.kill(int(entry.name), signum)
            found = True
        except OSError:
            continue
    return found


def kill_marked(run_id: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (daemons that left the group)."""
    for _ in range(3):
        if not signal_marked(run_id, signal.SIGKILL):
            return


def shell_argv(shell: str, cmd: str | bytes | Sequence[str]) -> tuple[list[str], bytes | None]:
    """The argv to start (a string runs under ``shell``), and the script for a shell command too long to pass
    as one argument (``None`` when it fits)."""
    if isinstance(cmd, bytes):
        cmd = cmd.decode("utf-8", errors="replace")
    if not isinstance(cmd, str):
        return [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in cmd], None
    script = cmd.encode(errors="surrogatepass")
    return [shell, "-c", cmd], (script if len(script) >= ARG_INLINE_MAX else None)


def command_environment(
    python: str, *, home: str, tmp: str, extra: Mapping[str, str] | None, run_id: str
) -> dict[str, str]:
    """A command's whole environment: a clean base (the interpreter's folder first on ``PATH``), ``extra``
    over it, and the run's marker."""
    path_dirs = [os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    env = {
        "PATH": ":".join(dict.fromkeys(path_dirs)),
        "HOME": home,
        "USER": SANDBOX_USER,
        "LOGNAME": SANDBOX_USER,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": tmp,
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    env[RUN_MARKER] = run_id
    return env
