"""``LocalSandbox``: a throw-away workspace where commands run under bubblewrap and rlimits.

With bubblewrap (``bwrap``) every command gets fresh namespaces (user, pid, net, ipc, uts, mount):
the system is read-only, the workspace (``/workspace``), ``/tmp`` and ``$HOME`` are the sandbox's own
directories, the network is loopback only, no capabilities are left, and when the command ends the
pid namespace takes everything it started with it. Without bubblewrap commands still run with the
rlimits in the workspace directory, and a warning says how much less that isolates.

What the host shows inside: the system directories, a copy of the harmless parts of ``/etc``, and the
interpreter's prefixes and site-packages, all read-only, plus ``binds_ro``. Never the working directory,
``$HOME``, the checkout or other ``sys.path`` entries (an editable install's sources are not importable
inside). As root, bubblewrap itself runs as host uid ``HOST_UID`` (nobody, via ``setpriv``), so the sandbox
user is not host root on the file system: files the host keeps private (``0600``, ``0700``) stay unreadable,
and a host unix socket is reachable only where anyone on the host may connect to it. Folders that uid cannot
traverse to (an interpreter under ``/root``) are bind-mounted read-only into the sandbox's own folder first.

Disk: the workspace, /tmp and home share one size cap, ``disk_mb`` (a tmpfs per sandbox, see
:mod:`claw_envs.sandbox.folders`); ``/dev/shm`` has the same cap per command (bubblewrap >= 0.8). A write
past it fails with "No space left on device" and the command's stderr says the quota was exceeded. Folders
left by a killed process are swept when the first sandbox of a process starts.

Limits: ``RLIMIT_AS``/``CPU``/``FSIZE``/``NOFILE`` are set in the child before exec; the process
count uses ``RLIMIT_NPROC`` inside the user namespace (the kernel ignores it for root, so as root a
fresh pids+memory cgroup per command does it when the host allows). Output is read incrementally
into a head+tail buffer of ``output_limit`` bytes per stream. A shell command too long for one
argument (the kernel caps each at 128 KiB) is read by the shell from an inherited memory file.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import posixpath
import selectors
import shutil
import signal
import site
import stat
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

from claw_envs.sandbox.base import Bind, ExecResult, Sandbox, SandboxError, Spawned
from claw_envs.sandbox.folders import is_full, new_folder, remove_folder, stage_bind, sweep_orphans
from claw_envs.sandbox.limits import (
    Limits,
    RunCgroup,
    apply_rlimits,
    limit_note,
    prlimit_options,
    user_task_count,
    with_note,
)
from claw_envs.sandbox.output import CappedOutput

SANDBOX_UID = 1000
SANDBOX_USER = "sandbox"
HOST_UID = 65534  # as root, bubblewrap and the commands run as this host uid and gid (nobody)
INSIDE_WORKSPACE = "/workspace"
INSIDE_HOME = f"/home/{SANDBOX_USER}"
INSIDE_TMP = "/tmp"
AREAS = ("workspace", "tmp", "home")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "hosts",
    "resolv.conf",
    "host.conf",
    "protocols",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "mime.types",
    "magic",
    "inputrc",
    "terminfo",
    "locale.alias",
    "os-release",
    "debian_version",
    "python3",
    f"python{sys.version_info.major}.{sys.version_info.minor}",
)
CGROUP_JOIN_FAILED = "claw-sandbox: cannot join cgroup"
CGROUP_JOIN = (  # sh -c CGROUP_JOIN sh <cgroup.procs files...> -- <command...>
    f'while [ "$1" != -- ]; do echo $$ > "$1" || {{ echo "{CGROUP_JOIN_FAILED} $1" >&2; exit 125; }}; shift; done; '
    'shift; exec "$@"'
)
RUN_MARKER = "CLAW_SANDBOX_RUN"  # set in every command's environment; finds escaped processes without bwrap
ARG_INLINE_MAX = 64 << 10  # longer shell commands are read from a memory file (one argument holds <= 128 KiB)
EXIT_GRACE = 0.2  # seconds to wait for output pipes to close after the command itself exited
DRAIN_WAIT = 2.0  # seconds to keep reading after a kill
_CHUNK = 1 << 16
Running = tuple[subprocess.Popen, str, RunCgroup | None]  # a started command: process, run id, cgroup

_warned: set[str] = set()


class LocalSandbox(Sandbox):
    """A workspace on this machine; commands run isolated by bubblewrap when it is available.

    ``isolation``: ``"auto"`` (bubblewrap if it works here, else rlimits with a warning), ``"bwrap"``
    (fail with :class:`SandboxError` when it does not) or ``"rlimits"`` (no namespaces, for hosts
    where they are unavailable). The attribute of the same name says what is in force:
    ``"bwrap"`` or ``"rlimits-only"``. ``binds_ro`` are extra host paths made visible read-only at the
    same path (or ``(host_path, inside_path)`` pairs). ``python`` is the interpreter to use inside;
    its prefixes and site-packages are bound read-only, so it imports the installed packages.
    ``disk_mb`` caps what the workspace, /tmp and home hold together; ``disk_capped`` says whether
    the cap is in force (it needs root to mount). ``workspace`` is where the workspace appears inside under
    bubblewrap (``/testbed``, ``/app``: the absolute paths benchmark tasks expect); without bubblewrap it is a
    host folder and tasks must use relative paths.

    Every command's processes end with it: background jobs do not outlive the command.
    """

    def __init__(
        self,
        *,
        memory_mb: int = 1024,
        cpu_seconds: int = 30,
        max_processes: int = 128,
        max_file_mb: int = 64,
        disk_mb: int = 256,
        output_limit: int = 65536,
        network: bool = False,
        binds_ro: Iterable[str | tuple[str, str]] = (),
        isolation: Literal["auto", "bwrap", "rlimits"] = "auto",
        workspace: str = INSIDE_WORKSPACE,
    ):
        if isolation not in ("auto", "bwrap", "rlimits"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'rlimits', got {isolation!r}")
        if not isinstance(output_limit, int) or output_limit < 2:
            raise ValueError(f"output_limit must be an integer >= 2, got {output_limit!r}")
        self._inside_workspace = _checked_workspace(workspace)
        self.limits = Limits(memory_mb, cpu_seconds, max_processes, max_file_mb, disk_mb=disk_mb)
        self.output_limit = output_limit
        self.network = bool(network)
        self.binds_ro = _normalise_binds(binds_ro)
        self.python = sys.executable
        self._closed = False
        self._running: set[Running] = set()
        self._spawned: weakref.WeakSet[Spawned] = weakref.WeakSet()
        _sweep_once()
        self._root, self.disk_capped = new_folder(quota=self.limits.disk_mb << 20)
        self._finalizer = weakref.finalize(self, remove_folder, self._root)
        for name in AREAS:
            (self._root / name).mkdir()
        self._run_as: list[str] = []  # the prefix that starts bubblewrap as HOST_UID, when it does
        if not self.disk_capped:
            _warn_once(
                "LocalSandbox: no disk quota (mounting a size-capped tmpfs needs root): commands may fill the disk."
            )
        self._shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        self._prlimit = shutil.which("prlimit", path="/usr/bin:/bin")

        bwrap = shutil.which("bwrap") if isolation != "rlimits" else None
        if isolation == "rlimits":
            reason: str | None = "isolation='rlimits' was requested"
        elif bwrap is None:
            reason = "bubblewrap (bwrap) is not installed"
        else:
            reason = self._set_up_bwrap(bwrap)
        if reason is not None and isolation == "bwrap":
            self.close()
            raise SandboxError(f"isolation='bwrap' requested but bubblewrap cannot run here: {reason}")

        if reason is None:
            self.isolation = "bwrap"
            self.workspace = self._inside_workspace
            self._areas = {self._inside_workspace: "workspace", INSIDE_TMP: "tmp", INSIDE_HOME: "home"}
        else:
            self.isolation = "rlimits-only"
            self.workspace = str(self._root / "workspace")
            self._areas = {str(self._root / name): name for name in AREAS}
            _warn_once(
                f"LocalSandbox runs WITHOUT namespace isolation ({reason}): commands can read and write "
                "anything this user can and reach the network; only rlimits apply. Install bubblewrap "
                "(apt-get install bubblewrap) for real isolation.",
            )
        self._cgroups_usable = os.geteuid() == 0 and _cgroups_available()
        if os.geteuid() == 0 and not self._cgroups_usable:
            _warn_once(
                "LocalSandbox: running as root without a writable pids cgroup, so the process limit "
                "(max_processes) is not enforced (the kernel ignores RLIMIT_NPROC for root)."
            )

    # -- the Sandbox interface ---------------------------------------------------------------

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
        """Run ``cmd`` (a string goes to bash, a list is exec'd as is) for at most ``timeout`` seconds.

        Whatever the command does comes back as an :class:`ExecResult`: a timeout kills every process
        it started (``timed_out=True``, return code 137); a signal ``N`` reads as ``128 + N``;
        a command that cannot be started reads as 126/127 with the reason on stderr.
        ``binds`` show host folders inside for this command only (see :meth:`host_folder`).
        Raises :class:`SandboxError` only when the sandbox itself fails.
        """
        if self._closed:
            raise SandboxError("this sandbox is closed")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        argv, script = self._argv(cmd)
        if not argv:
            return ExecResult(127, "", "sandbox: empty command")
        inside_cwd = self._inside_path(cwd if cwd is not None else ".")
        if not self._host_path(inside_cwd).is_dir():
            return ExecResult(1, "", f"sandbox: working directory {inside_cwd} does not exist")
        with _memory_file(script) as fds:
            if fds:  # the shell reads the script from the file instead of its argument
                argv = [self._shell, "-c", f'eval "$(cat <&{fds[0]})" {fds[0]}<&-']
            return self._execute(argv, fds, timeout, env, inside_cwd, stdin, binds)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> Spawned:
        """Start ``argv`` as a long-lived process with pipes on its stdin, stdout and stderr, under the same
        isolation and limits as :meth:`run` but no time limit; ``Spawned.kill()`` or :meth:`close` ends it and
        everything it started."""
        if self._closed:
            raise SandboxError("this sandbox is closed")
        inside_cwd = self._inside_path(cwd if cwd is not None else ".")
        started = self._start(list(argv), (), env, inside_cwd, stdin_pipe=True)
        if isinstance(started, ExecResult):
            raise SandboxError(f"cannot start {argv[0]!r}: {started.stderr}")
        spawned = Spawned(started[0], functools.partial(self._finish, started))
        self._spawned.add(spawned)
        return spawned

    def host_folder(self, name: str, *, writable: bool = False) -> Path:
        """A new empty host folder of this sandbox that no command sees unless a ``run`` binds it (read-only:
        commands can read what the host writes there; ``writable``: commands may also write). Removed by
        :meth:`close`."""
        if self._closed:
            raise SandboxError("this sandbox is closed")
        folder = self._root / "host" / f"{name}-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        folder.parent.chmod(0o711)
        folder.chmod(0o755)
        if writable:
            self._own(folder)
        return folder

    def read_file(self, path: str) -> bytes:
        """Bytes of ``path`` (relative to the workspace, or absolute under the workspace, /tmp or $HOME)."""
        host = self._resolved(path)
        return host.read_bytes()

    def write_file(self, path: str, data: str | bytes) -> None:
        """Create or replace ``path``; parents are created; a symlink is never written through."""
        host = self._host_path(self._inside_path(path))
        self._make_parents(path, host)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        try:
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if host.is_symlink():
                raise ValueError(f"{path!r} is a symlink; refusing to write through it") from err
            raise
        with os.fdopen(fd, "wb") as fh:
            if self._run_as:
                os.fchown(fh.fileno(), HOST_UID, HOST_UID)
            fh.write(payload)

    def close(self) -> None:
        """Kill commands still running, delete the workspace and everything in it; safe to call twice."""
        self._closed = True
        for spawned in list(self._spawned):
            spawned.kill()
        for running in list(self._running):
            self._kill_tree(*running)
        self._finalizer()

    # -- paths -------------------------------------------------------------------------------

    def _inside_path(self, path: str) -> str:
        """``path`` as an absolute, normalised path inside the sandbox (relative: under the workspace)."""
        path = os.fspath(path)
        if "\0" in path:
            raise ValueError("path contains a NUL byte")
        return posixpath.normpath(posixpath.join(self.workspace, path))

    def _host_path(self, inside: str) -> Path:
        """Where an inside path lives on the host; only the workspace, /tmp and $HOME are mapped."""
        for area_inside, name in self._areas.items():
            if inside == area_inside or inside.startswith(area_inside + "/"):
                return self._root / name / posixpath.relpath(inside, area_inside)
        raise ValueError(f"{inside!r} is outside the sandbox's workspace, /tmp and home directories")

    def _area_of(self, host: Path) -> Path:
        for name in self._areas.values():
            if host.is_relative_to(self._root / name):
                return self._root / name
        raise ValueError(f"{host} is outside the sandbox")

    def _make_parents(self, path: str, host: Path) -> None:
        """Create the folders above ``host`` (owned by the sandbox user), never through a symlink out of its area."""
        area = self._area_of(host)
        folder = area
        for part in host.parent.relative_to(area).parts:
            folder = folder / part
            if not folder.resolve().is_relative_to(area.resolve()):
                raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
            if not folder.is_dir():
                folder.mkdir()
                self._own(folder)

    def _own(self, path: Path) -> None:
        """Hand ``path`` to the host uid commands run as (when that is not this process's)."""
        if self._run_as:
            os.chown(path, HOST_UID, HOST_UID, follow_symlinks=False)

    def _own_areas(self) -> None:
        """Hand the workspace, /tmp and home to the host uid commands run as."""
        uid, gid = (HOST_UID, HOST_UID) if self._run_as else (os.getuid(), os.getgid())
        for name in AREAS:
            os.chown(self._root / name, uid, gid)

    def _resolved(self, path: str) -> Path:
        host = self._host_path(self._inside_path(path))
        area = self._area_of(host)
        resolved = host.resolve()
        if not resolved.is_relative_to(area.resolve()):
            raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
        return resolved

    # -- launching ---------------------------------------------------------------------------

    def _execute(
        self,
        argv: list[str],
        fds: tuple[int, ...],
        timeout: float,
        env: Mapping[str, str] | None,
        inside_cwd: str,
        stdin: str | bytes | None,
        binds: Sequence[Bind] = (),
    ) -> ExecResult:
        """Start ``argv`` (passing it ``fds``), feed it ``stdin``, collect its output and clean up after it."""
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        started = self._start(argv, fds, env, inside_cwd, stdin_pipe=bool(data), binds=binds)
        if isinstance(started, ExecResult):
            return started
        proc, run_id, cgroup = running = started
        oom_kills = 0
        try:
            out, err, timed_out = self._communicate(proc, timeout, data, run_id, cgroup)
        finally:
            oom_kills = self._finish(running)
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if cgroup is not None and code == 125 and err.head.startswith(CGROUP_JOIN_FAILED.encode()):
            raise SandboxError(err.text().strip())
        if self.isolation == "bwrap" and code == 1 and out.total == 0 and err.head.startswith(b"bwrap: "):
            raise SandboxError(f"bubblewrap failed to start the command: {err.text().strip()}")
        return ExecResult(
            returncode=code,
            stdout=out.text(),
            stderr=with_note(err.text(), self._limit_note(code, timed_out, timeout, oom_kills)),
            timed_out=timed_out,
            duration=time.monotonic() - start,
            truncated=out.truncated or err.truncated,
        )

    def _limit_note(self, code: int, timed_out: bool, timeout: float, oom_kills: int) -> str | None:
        """What a limit did to a command that ended with ``code`` (``None``: nothing)."""
        disk_full = self.disk_capped and is_full(self._root)
        return limit_note(self.limits, code, timed_out, timeout, oom_kills, disk_full)

    def _start(
        self,
        argv: list[str],
        fds: tuple[int, ...],
        env: Mapping[str, str] | None,
        inside_cwd: str,
        *,
        stdin_pipe: bool,
        binds: Sequence[Bind] = (),
    ) -> Running | ExecResult:
        """Launch ``argv`` with piped output (and stdin when ``stdin_pipe``), tracked until :meth:`_finish`; an
        :class:`ExecResult` when it could not start (the agent's fault)."""
        run_id = uuid.uuid4().hex
        command, popen_env, popen_cwd, nproc = self._command_line(
            argv, inside_cwd, self._environment(env, run_id), binds
        )
        cgroup = RunCgroup.create(self.limits) if self._cgroups_usable else None
        launch, preexec = self._launcher(self.limits.rlimits(nproc=nproc), cgroup)
        try:
            proc = subprocess.Popen(
                [*launch, *command],
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=popen_cwd,
                env=popen_env,
                start_new_session=True,
                preexec_fn=preexec,
                pass_fds=fds,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            if cgroup:
                cgroup.remove()
            return self._launch_failure(err, argv[0], time.monotonic())
        running = (proc, run_id, cgroup)
        self._running.add(running)
        return running

    def _finish(self, running: Running) -> int:
        """Kill what is left of a started command, reap it and drop its cgroup; the OOM kills it suffered."""
        proc, run_id, cgroup = running
        self._running.discard(running)
        self._kill_tree(proc, run_id, cgroup)
        proc.wait()
        oom_kills = 0
        if cgroup:
            oom_kills = cgroup.oom_kills()
            cgroup.remove()
        return oom_kills

    def _command_line(
        self, argv: list[str], inside_cwd: str, environment: dict[str, str], binds: Sequence[Bind] = ()
    ) -> tuple[list[str], dict[str, str], str | None, int | None]:
        """What to exec (after the launcher), its environment, its host cwd, and the RLIMIT_NPROC to set outside."""
        if self.isolation != "bwrap":
            if binds:
                raise SandboxError(f"binds for one command need bubblewrap; this sandbox runs {self.isolation}")
            nproc = None if os.geteuid() == 0 else user_task_count(os.getuid()) + self.limits.max_processes
            return argv, environment, str(self._host_path(inside_cwd)), nproc
        extra = []
        for bind in binds:
            extra += ["--bind" if bind.writable else "--ro-bind", self._reachable(bind.host), bind.inside]
        full = [*self._run_as, *self._bwrap_args[:-2], *extra, *self._bwrap_args[-2:], "--chdir", inside_cwd]
        for key, value in environment.items():
            full += ["--setenv", key, value]
        inner = [self._prlimit, f"--nproc={self.limits.max_processes}", "--"] if self._prlimit else []
        return [*full, "--", *inner, *argv], {}, None, None

    def _launch_failure(self, err: Exception, program: str, start: float) -> ExecResult:
        """A command that could not be started: the agent's error (126/127), or :class:`SandboxError` when the
        sandbox could not start."""
        duration = time.monotonic() - start
        if isinstance(err, OSError) and err.errno == errno.E2BIG:
            message = f"sandbox: the command is too long to start ({err.strerror}); write long text to a file first"
            return ExecResult(126, "", message, duration=duration)
        if isinstance(err, subprocess.SubprocessError) or (isinstance(err, OSError) and self.isolation == "bwrap"):
            raise SandboxError(f"could not launch the sandboxed command: {err}") from err
        code = 127 if isinstance(err, FileNotFoundError) else 126
        return ExecResult(code, "", f"sandbox: cannot start {program!r}: {err}", duration=duration)

    def _argv(self, cmd: str | bytes | Sequence[str]) -> tuple[list[str], bytes | None]:
        """The argv to start, and the script for a shell command too long to pass as one argument."""
        if isinstance(cmd, bytes):
            cmd = cmd.decode("utf-8", errors="replace")
        if not isinstance(cmd, str):
            return [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in cmd], None
        script = cmd.encode(errors="surrogatepass")
        if len(script) < ARG_INLINE_MAX:
            return [self._shell, "-c", cmd], None
        return [self._shell, "-c", cmd], script

    def _environment(self, extra: Mapping[str, str] | None, run_id: str) -> dict[str, str]:
        home = INSIDE_HOME if self.isolation == "bwrap" else str(self._root / "home")
        tmp = INSIDE_TMP if self.isolation == "bwrap" else str(self._root / "tmp")
        path_dirs = [os.path.dirname(self.python), "/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
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

    def _set_up_bwrap(self, bwrap: str) -> str | None:
        """Build the bubblewrap command line and check that it starts: ``None``, or the reason it cannot.

        As root, bubblewrap runs as ``HOST_UID``; where that uid may not make namespaces, it runs as root
        (the sandbox user is then host root on the file system, without capabilities), with a warning.
        """
        self._run_as = list(_run_as_host_uid())
        self._own_areas()
        self._bwrap_args = self._bwrap_base(bwrap)
        reason = _probe(tuple(self._run_as + self._bwrap_args), self._root)
        if reason is None or not self._run_as:
            return reason
        _warn_once(
            f"LocalSandbox: bubblewrap cannot run as uid {HOST_UID} here ({reason}); it runs as root, so host files "
            "private to root are readable where a sandbox shows them."
        )
        self._run_as = []
        self._own_areas()
        self._bwrap_args = self._bwrap_base(bwrap)
        return _probe(tuple(self._bwrap_args), self._root)

    def _bwrap_base(self, bwrap: str) -> list[str]:
        """The bubblewrap command line shared by every command of this sandbox."""
        args = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        args += ["--cap-drop", "ALL", "--new-session", "--die-with-parent", "--hostname", SANDBOX_USER]
        if "--disable-userns" in _bwrap_help(bwrap):
            args.append("--disable-userns")
        if self.network:
            args.append("--share-net")
        for name in SYSTEM_DIRS:
            if os.path.islink(name):
                args += ["--symlink", os.readlink(name), name]
            elif os.path.isdir(name):
                args += ["--ro-bind", name, name]
        args += ["--ro-bind", str(_shared() / "etc"), "/etc"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        if "--size" in _bwrap_help(bwrap):  # bubblewrap >= 0.8
            args += ["--perms", "1777", "--size", str(self.limits.disk_mb << 20), "--tmpfs", "/dev/shm"]
        args += ["--bind", str(self._root / "tmp"), INSIDE_TMP]
        args += ["--bind", str(self._root / "home"), INSIDE_HOME]
        args += ["--bind", str(self._root / "workspace"), self._inside_workspace]
        args += ["--symlink", INSIDE_TMP, "/var/tmp"]
        for path in _interpreter_dirs():
            args += ["--ro-bind", self._reachable(path), path]
        for i, (host, inside) in enumerate(self.binds_ro):
            args += ["--ro-bind", self._reachable(host, self._root / "binds" / str(i)), inside]
        args += ["--remount-ro", "/"]
        return args

    def _reachable(self, host: str, stage_at: Path | None = None) -> str:
        """``host``, or where a read-only view of it is staged (``stage_at``, else a folder shared by this
        process's sandboxes) when the uid bubblewrap runs as cannot search the folders above it."""
        if not self._run_as or _searchable(host):
            return host
        if stage_at is None:
            return _staged(host)
        if not stage_at.exists():
            stage_bind(host, stage_at)
        return str(stage_at)

    # -- collecting output and cleaning up ---------------------------------------------------

    def _communicate(
        self, proc: subprocess.Popen, timeout: float, data: bytes | None, run_id: str, cgroup: RunCgroup | None
    ) -> tuple[CappedOutput, CappedOutput, bool]:
        """Feed stdin and read both streams until they close, the deadline passes, or the command
        exited and something it left behind still holds the pipes (then kill it)."""
        out, err = CappedOutput(self.output_limit), CappedOutput(self.output_limit)
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
                    self._kill_tree(proc, run_id, cgroup)
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

    def _launcher(
        self, rlimits: list[tuple[int, int, int]], cgroup: RunCgroup | None
    ) -> tuple[list[str], Callable[[], None] | None]:
        """The command prefix that joins the cgroup and sets the rlimits, and a ``preexec_fn`` if needed.

        Small exec'd helpers (sh, prlimit) instead of a Python ``preexec_fn`` let ``subprocess`` use
        vfork, which saves a fork of this whole process per command.
        """
        prefix = []
        if cgroup is not None:
            prefix += ["/bin/sh", "-c", CGROUP_JOIN, "sh", *cgroup.procs_files(), "--"]
        if self._prlimit is None:
            return prefix, functools.partial(apply_rlimits, rlimits)
        return [*prefix, self._prlimit, *prlimit_options(rlimits), "--"], None

    def _kill_tree(self, proc: subprocess.Popen, run_id: str, cgroup: RunCgroup | None) -> None:
        """SIGKILL the command's process group, its cgroup, and (without bwrap) anything carrying its marker."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()
        if self.isolation != "bwrap":
            _kill_marked(run_id)


@contextlib.contextmanager
def _memory_file(data: bytes | None) -> Iterator[tuple[int, ...]]:
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


def _kill_marked(run_id: str) -> None:
    """SIGKILL every process whose environment carries this run's marker (daemons that left the group)."""
    needle = f"{RUN_MARKER}={run_id}".encode()
    for _ in range(3):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    if needle not in fh.read().split(b"\0"):
                        continue
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
            except OSError:
                continue
        if not found:
            return


def _checked_workspace(path: str) -> str:
    """``path`` if it can hold the workspace inside: absolute, normalised, and clear of the system, /tmp and home."""
    taken = (*SYSTEM_DIRS, "/etc", "/proc", "/dev", "/sys", INSIDE_TMP, "/var", "/home", "/root", *_interpreter_dirs())
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        raise ValueError(f"workspace must be an absolute, normalised folder such as /testbed, got {path!r}")
    if _within(path, taken) or any(_within(system, (path,)) for system in taken):
        raise ValueError(f"workspace {path!r} would overlap {', '.join(taken)}")
    return path


def _interpreter_dirs() -> list[str]:
    """The host folders the interpreter needs: its prefixes and site-packages. Never other ``sys.path`` entries
    (the working directory, a checkout, an editable install's sources), nor a folder holding the home or
    working directory, nor one that would hide the sandbox's own folders."""
    paths = sysconfig.get_paths()
    candidates = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    candidates.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    candidates.update(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))
    candidates.update(p for p in [*site.getsitepackages(), site.getusersitepackages()] if p in sys.path)
    kept_out = (os.path.expanduser("~"), os.getcwd(), INSIDE_TMP, INSIDE_HOME, INSIDE_WORKSPACE, "/var/tmp")
    dirs: list[str] = []
    for path in sorted({os.path.abspath(p) for p in candidates if os.path.isdir(p)}):
        if _within(path, (*dirs, *SYSTEM_DIRS)):
            continue  # already visible
        if path == "/" or any(_within(private, (path,)) for private in kept_out):
            _warn_once(f"LocalSandbox: {path} is not shown inside (it holds home, the working directory or /tmp).")
            continue
        dirs.append(path)
    return dirs


def _within(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _searchable(path: str) -> bool:
    """Whether any user may reach ``path``: every folder above it lets others search it."""
    return all(os.stat(folder).st_mode & stat.S_IXOTH for folder in Path(os.path.realpath(path)).parents)


_staging_lock = threading.Lock()
_stages: dict[str, str] = {}


def _staged(host: str) -> str:
    """A read-only view of ``host`` in this process's shared sandbox folder (staged once)."""
    with _staging_lock:
        if host not in _stages:
            mountpoint = _shared() / "binds" / str(len(_stages))
            stage_bind(host, mountpoint)
            _stages[host] = str(mountpoint)
        return _stages[host]


@functools.cache
def _run_as_host_uid() -> tuple[str, ...]:
    """The ``setpriv`` prefix that starts bubblewrap as ``HOST_UID`` when this process is root, else ``()``."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        _warn_once(
            "LocalSandbox: setpriv (util-linux) is missing, so bubblewrap runs as root and host files private "
            "to root are readable where a sandbox shows them."
        )
        return ()
    return (setpriv, f"--reuid={HOST_UID}", f"--regid={HOST_UID}", "--clear-groups", "--")


@functools.cache
def _sweep_once() -> None:
    """Remove the folders of sandboxes whose process died (once per process, before its first sandbox)."""
    sweep_orphans()


def _normalise_binds(binds: Iterable[str | tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for bind in binds:
        host, inside = (bind, bind) if isinstance(bind, str | os.PathLike) else bind
        host, inside = os.path.abspath(os.fspath(host)), os.fspath(inside)
        if not os.path.exists(host):
            raise ValueError(f"binds_ro: {host} does not exist")
        if not posixpath.isabs(inside):
            raise ValueError(f"binds_ro: the inside path must be absolute, got {inside!r}")
        pairs.append((host, inside))
    return tuple(pairs)


@functools.cache
def _shared() -> Path:
    """This process's folder for all its sandboxes: staged binds, and ``etc``, a read-only ``/etc`` with copies
    of the few host entries commands need (no secrets: not shadow, not ssl/private) plus our own passwd and group.

    One bind mount for /etc instead of one per entry keeps each command's start-up cheap.
    """
    root, _capped = new_folder("shared-")
    atexit.register(remove_folder, root)
    etc = root / "etc"
    etc.mkdir()
    etc.chmod(0o755)
    for name in ETC_ENTRIES:
        src, dst = Path("/etc", name), etc / name
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # an unreadable entry is left out, not fatal
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:claw sandbox:{INSIDE_HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
    return root


@functools.cache
def _cgroups_available() -> bool:
    """Whether this process may create the per-command pids cgroup (checked once)."""
    cgroup = RunCgroup.create(Limits())
    if cgroup is None:
        return False
    cgroup.remove()
    return True


@functools.cache
def _bwrap_help(bwrap: str) -> str:
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


_probed: dict[tuple[str, ...], str | None] = {}


def _probe(base: tuple[str, ...], root: Path) -> str | None:
    """``None`` when bubblewrap can start ``true`` with this layout, else the reason it cannot.

    Layouts differ only in this sandbox's own directories, so the answer is cached per layout shape.
    """
    shape = tuple(a.replace(str(root), "<root>") for a in base)
    if shape not in _probed:
        try:
            done = subprocess.run([*base, "--", "true"], capture_output=True, text=True, timeout=30)
            _probed[shape] = None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")
        except (OSError, subprocess.SubprocessError) as err:
            _probed[shape] = str(err)
    return _probed[shape]


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
