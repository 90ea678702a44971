"""``LocalSandbox``: a throw-away workspace where commands run under bubblewrap and rlimits.

With bubblewrap (``bwrap``) every command gets fresh namespaces (user, pid, net, ipc, uts, mount):
the system is read-only, the workspace (``/workspace``), ``/tmp`` and ``$HOME`` are the sandbox's own
directories, the network is loopback only, no capabilities are left, and when the command ends the
pid namespace takes everything it started with it. Fail closed: where bubblewrap is missing or the kernel refuses
its namespaces, the sandbox refuses to start (:class:`SandboxError` naming the cause and the fix). Running with
rlimits only (no namespaces, the workspace a host folder, the user's rights) is an explicit opt-in, with a warning:
``isolation="rlimits"`` or ``CLAW_SANDBOX_ISOLATION=rlimits`` (:mod:`claw_envs.sandbox.isolation`).

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

import contextlib
import errno
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from claw_envs.sandbox.areas import Areas
from claw_envs.sandbox.base import Bind, ExecResult, Sandbox, SandboxError, Spawned
from claw_envs.sandbox.folders import is_full, new_folder, remove_folder, sweep_orphans_once
from claw_envs.sandbox.isolation import bubblewrap_refused, no_bubblewrap, opted_in_with, requested
from claw_envs.sandbox.layout import (
    AREAS,
    HOST_UID,
    INSIDE_HOME,
    INSIDE_TMP,
    INSIDE_WORKSPACE,
    bwrap_command,
    checked_workspace,
    normalise_binds,
    probe,
    reachable,
    run_as_host_uid,
    warn_once,
)
from claw_envs.sandbox.limits import Limits, RunCgroup, cgroups_available, limit_note, user_task_count, with_note
from claw_envs.sandbox.process import (
    CGROUP_JOIN_FAILED,
    command_environment,
    communicate,
    kill_marked,
    launcher,
    memory_file,
    shell_argv,
    signal_marked,
)

Running = tuple[subprocess.Popen, str, RunCgroup | None]  # a started command: process, run id, cgroup


class LocalSandbox(Sandbox):
    """A workspace on this machine; commands run isolated by bubblewrap, or not at all.

    ``isolation``: ``"bwrap"`` (where bubblewrap cannot run, :class:`SandboxError` naming the cause and the fix),
    ``"rlimits"`` (an opt-in, with a warning: no namespaces, for hosts where they are unavailable) or ``"auto"``,
    the process's choice: ``$CLAW_SANDBOX_ISOLATION`` (unset: bwrap). The attribute of the same name says what
    is in force: ``"bwrap"`` or ``"rlimits-only"``. ``binds_ro`` are extra host paths made visible read-only at
    the same path (or ``(host_path, inside_path)`` pairs). ``python`` is the interpreter to use inside;
    its prefixes and site-packages are bound read-only, so it imports the installed packages.
    ``disk_mb`` caps what the workspace, /tmp and home hold together; ``disk_capped`` says whether
    the cap is in force (it needs root to mount). ``workspace`` is where the workspace appears inside under
    bubblewrap (``/testbed``, ``/app``: the absolute paths benchmark tasks expect); with rlimits only it is a
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
        if not isinstance(output_limit, int) or output_limit < 2:
            raise ValueError(f"output_limit must be an integer >= 2, got {output_limit!r}")
        mode = requested(isolation)  # fail closed: bubblewrap, or rlimits only when asked for
        bwrap = shutil.which("bwrap") if mode == "bwrap" else None
        if mode == "bwrap" and bwrap is None:
            raise no_bubblewrap()
        self._inside_workspace = checked_workspace(workspace)
        self.limits = Limits(memory_mb, cpu_seconds, max_processes, max_file_mb, disk_mb=disk_mb)
        self.output_limit = output_limit
        self.network = bool(network)
        self.binds_ro = normalise_binds(binds_ro)
        self.python = sys.executable
        self._closed = False
        self._running: set[Running] = set()
        self._spawned: weakref.WeakSet[Spawned] = weakref.WeakSet()
        sweep_orphans_once()
        self._root, self.disk_capped = new_folder(quota=self.limits.disk_mb << 20)
        self._finalizer = weakref.finalize(self, remove_folder, self._root)
        for name in AREAS:
            (self._root / name).mkdir()
        self._run_as: list[str] = []  # the prefix that starts bubblewrap as HOST_UID, when it does
        if not self.disk_capped:
            warn_once(
                "LocalSandbox: no disk quota (mounting a size-capped tmpfs needs root): commands may fill the disk."
            )
        self._shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        self._prlimit = shutil.which("prlimit", path="/usr/bin:/bin")

        if bwrap is not None and (reason := self._set_up_bwrap(bwrap)) is not None:
            self.close()
            raise bubblewrap_refused(reason)
        if bwrap is not None:
            self.isolation = "bwrap"
            self.workspace = self._inside_workspace
            mapping = {self._inside_workspace: "workspace", INSIDE_TMP: "tmp", INSIDE_HOME: "home"}
        else:
            self.isolation = "rlimits-only"
            self.workspace = str(self._root / "workspace")
            mapping = {str(self._root / name): name for name in AREAS}
            warn_once(
                f"LocalSandbox runs WITHOUT namespace isolation (opted in with {opted_in_with(isolation)}): commands "
                "can read and write anything this user can and reach the network; only rlimits apply."
            )
        self._paths = Areas(self._root, mapping, self.workspace)
        self._cgroups_usable = os.geteuid() == 0 and cgroups_available()
        if os.geteuid() == 0 and not self._cgroups_usable:
            warn_once(
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
        argv, script = shell_argv(self._shell, cmd)
        if not argv:
            return ExecResult(127, "", "sandbox: empty command")
        inside_cwd = self._paths.inside_path(cwd if cwd is not None else ".")
        if not self._paths.host_path(inside_cwd).is_dir():
            return ExecResult(1, "", f"sandbox: working directory {inside_cwd} does not exist")
        with memory_file(script) as fds:
            if fds:  # the shell reads the script from the file instead of its argument
                argv = [self._shell, "-c", f'eval "$(cat <&{fds[0]})" {fds[0]}<&-']
            return self._execute(argv, fds, timeout, env, inside_cwd, stdin, binds)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> Spawned:
        """Start ``argv`` as a long-lived process with pipes on its stdin, stdout and stderr, under the same
        isolation and limits as :meth:`run` but no time limit; ``Spawned.kill()`` or :meth:`close` ends it and
        everything it started."""
        if self._closed:
            raise SandboxError("this sandbox is closed")
        inside_cwd = self._paths.inside_path(cwd if cwd is not None else ".")
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
        host = self._paths.resolved(path)
        return host.read_bytes()

    def write_file(self, path: str, data: str | bytes) -> None:
        """Create or replace ``path``; parents are created; a symlink is never written through."""
        host = self._paths.host_path(self._paths.inside_path(path))
        self._paths.make_parents(path, host, self._own)
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

    def _own(self, path: Path) -> None:
        """Hand ``path`` to the host uid commands run as (when that is not this process's)."""
        if self._run_as:
            os.chown(path, HOST_UID, HOST_UID, follow_symlinks=False)

    def _own_areas(self) -> None:
        """Hand the workspace, /tmp and home to the host uid commands run as."""
        uid, gid = (HOST_UID, HOST_UID) if self._run_as else (os.getuid(), os.getgid())
        for name in AREAS:
            os.chown(self._root / name, uid, gid)

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
            kill = functools.partial(self._kill_tree, proc, run_id, cgroup)
            out, err, timed_out = communicate(proc, timeout, data, self.output_limit, kill)
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
        outside = self.isolation != "bwrap"
        environment = command_environment(
            self.python,
            home=str(self._root / "home") if outside else INSIDE_HOME,
            tmp=str(self._root / "tmp") if outside else INSIDE_TMP,
            extra=env,
            run_id=run_id,
        )
        command, popen_env, popen_cwd, nproc = self._command_line(argv, inside_cwd, environment, binds)
        cgroup = RunCgroup.create(self.limits) if self._cgroups_usable else None
        launch, preexec = launcher(self.limits.rlimits(nproc=nproc), cgroup, self._prlimit)
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
            return argv, environment, str(self._paths.host_path(inside_cwd)), nproc
        extra = []
        for bind in binds:
            host = reachable(bind.host, as_other_uid=bool(self._run_as))
            extra += ["--bind" if bind.writable else "--ro-bind", host, bind.inside]
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

    def _set_up_bwrap(self, bwrap: str) -> str | None:
        """Build the bubblewrap command line and check that it starts: ``None``, or the reason it cannot.

        As root, bubblewrap runs as ``HOST_UID``; where that uid may not make namespaces, it runs as root
        (the sandbox user is then host root on the file system, without capabilities), with a warning.
        """
        reason = self._layout(bwrap, list(run_as_host_uid()))
        if reason is None or not self._run_as:
            return reason
        as_root = self._layout(bwrap, [])
        if as_root is None:
            warn_once(
                f"LocalSandbox: bubblewrap cannot run as uid {HOST_UID} here ({reason}); it runs as root, so host "
                "files private to root are readable where a sandbox shows them."
            )
        return as_root

    def _layout(self, bwrap: str, run_as: list[str]) -> str | None:
        """Lay out the sandbox for bubblewrap started with the prefix ``run_as``; the probe's answer."""
        self._run_as = run_as
        self._own_areas()
        self._bwrap_args = bwrap_command(
            bwrap,
            root=self._root,
            workspace=self._inside_workspace,
            network=self.network,
            disk_mb=self.limits.disk_mb,
            binds_ro=self.binds_ro,
            as_other_uid=bool(run_as),
        )
        return probe(tuple(run_as + self._bwrap_args), self._root)

    # -- collecting output and cleaning up ---------------------------------------------------

    def _kill_tree(self, proc: subprocess.Popen, run_id: str, cgroup: RunCgroup | None) -> None:
        """Stop every process of the command (SIGSTOP), then SIGKILL its process group, its cgroup, and anything
        carrying its marker: without bwrap a daemon that left the group; with it, a child that bwrap, if killed
        while starting up, may not yet have tied to its own death. Stopped first because the cgroup and the marker
        are killed one process at a time and host pids wrap: a child killed before its parent let the parent run
        its next command (``sleep 5; echo 35.49 > total.txt`` killed at its deadline wrote the file under CI load).
        A process already reaped is not signalled by its number: pids wrap, and a new command may have it."""
        if cgroup is not None:
            cgroup.stop_all()
        signal_marked(run_id, signal.SIGSTOP)
        if proc.returncode is None:  # once reaped, its number may be another process group's (pids wrap)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill_all()
        kill_marked(run_id)
