"""``LocalSandbox``: a throw-away workspace where commands run under bubblewrap and rlimits.

With bubblewrap (``bwrap``) every command gets fresh namespaces (user, pid, net, ipc, uts, mount):
the system is read-only, the workspace (``/workspace``), ``/tmp`` and ``$HOME`` are the sandbox's own
directories, the network is loopback only, no capabilities are left, and when the command ends the
pid namespace takes everything it started with it. Without bubblewrap commands still run with the
rlimits in the workspace directory, and a warning says how much less that isolates.

Limits: ``RLIMIT_AS``/``CPU``/``FSIZE``/``NOFILE`` are set in the child before exec; the process
count uses ``RLIMIT_NPROC`` inside the user namespace (the kernel ignores it for root, so as root a
fresh pids+memory cgroup per command does it when the host allows). Output is read incrementally
into a head+tail buffer of ``output_limit`` bytes per stream.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import posixpath
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from claw_envs.sandbox.base import ExecResult, Sandbox, SandboxError
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
INSIDE_WORKSPACE = "/workspace"
INSIDE_HOME = f"/home/{SANDBOX_USER}"
INSIDE_TMP = "/tmp"
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
EXIT_GRACE = 0.2  # seconds to wait for output pipes to close after the command itself exited
DRAIN_WAIT = 2.0  # seconds to keep reading after a kill
_CHUNK = 1 << 16

_warned: set[str] = set()


class LocalSandbox(Sandbox):
    """A workspace on this machine; commands run isolated by bubblewrap when it is available.

    ``isolation``: ``"auto"`` (bubblewrap if it works here, else rlimits with a warning), ``"bwrap"``
    (fail with :class:`SandboxError` when it does not) or ``"rlimits"`` (no namespaces, for hosts
    where they are unavailable). The attribute of the same name says what is in force:
    ``"bwrap"`` or ``"rlimits-only"``. ``binds_ro`` are extra host paths made visible read-only at the
    same path (or ``(host_path, inside_path)`` pairs). ``python`` is the interpreter to use inside;
    the running interpreter's prefixes and the project's packages are bound read-only so that it
    imports what it imports here.

    Every command's processes end with it: background jobs do not outlive the command.
    """

    def __init__(
        self,
        *,
        memory_mb: int = 1024,
        cpu_seconds: int = 30,
        max_processes: int = 128,
        max_file_mb: int = 64,
        output_limit: int = 65536,
        network: bool = False,
        binds_ro: Iterable[str | tuple[str, str]] = (),
        isolation: Literal["auto", "bwrap", "rlimits"] = "auto",
    ):
        if isolation not in ("auto", "bwrap", "rlimits"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'rlimits', got {isolation!r}")
        if not isinstance(output_limit, int) or output_limit < 2:
            raise ValueError(f"output_limit must be an integer >= 2, got {output_limit!r}")
        self.limits = Limits(memory_mb, cpu_seconds, max_processes, max_file_mb)
        self.output_limit = output_limit
        self.network = bool(network)
        self.binds_ro = _normalise_binds(binds_ro)
        self.python = sys.executable
        self._closed = False
        self._running: set[tuple[subprocess.Popen, str, RunCgroup | None]] = set()
        self._root = Path(tempfile.mkdtemp(prefix="claw-sandbox-"))
        self._finalizer = weakref.finalize(self, _remove_tree, self._root)
        for name in ("workspace", "tmp", "home"):
            (self._root / name).mkdir()
        self._shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        self._prlimit = shutil.which("prlimit", path="/usr/bin:/bin")

        bwrap = shutil.which("bwrap") if isolation != "rlimits" else None
        if isolation == "rlimits":
            reason: str | None = "isolation='rlimits' was requested"
        elif bwrap is None:
            reason = "bubblewrap (bwrap) is not installed"
        else:
            self._bwrap_args = self._bwrap_base(bwrap)
            reason = _probe(tuple(self._bwrap_args), self._root)
        if reason is not None and isolation == "bwrap":
            self.close()
            raise SandboxError(f"isolation='bwrap' requested but bubblewrap cannot run here: {reason}")

        if reason is None:
            self.isolation = "bwrap"
            self.workspace = INSIDE_WORKSPACE
            self._areas = {INSIDE_WORKSPACE: "workspace", INSIDE_TMP: "tmp", INSIDE_HOME: "home"}
        else:
            self.isolation = "rlimits-only"
            self.workspace = str(self._root / "workspace")
            self._areas = {str(self._root / name): name for name in ("workspace", "tmp", "home")}
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
    ) -> ExecResult:
        """Run ``cmd`` (a string goes to bash, a list is exec'd as is) for at most ``timeout`` seconds.

        Whatever the command does comes back as an :class:`ExecResult`: a timeout kills every process
        it started (``timed_out=True``, return code 137); a signal ``N`` reads as ``128 + N``;
        a command that cannot be started reads as 126/127 with the reason on stderr.
        Raises :class:`SandboxError` only when the sandbox itself fails.
        """
        if self._closed:
            raise SandboxError("this sandbox is closed")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        argv = self._argv(cmd)
        if not argv:
            return ExecResult(127, "", "sandbox: empty command")
        inside_cwd = self._inside_path(cwd if cwd is not None else ".")
        host_cwd = self._host_path(inside_cwd)
        if not host_cwd.is_dir():
            return ExecResult(1, "", f"sandbox: working directory {inside_cwd} does not exist")
        run_id = uuid.uuid4().hex
        environment = self._environment(env, run_id)
        cgroup = RunCgroup.create(self.limits) if self._cgroups_usable else None
        if self.isolation == "bwrap":
            full = [*self._bwrap_args, "--chdir", inside_cwd]
            for key, value in environment.items():
                full += ["--setenv", key, value]
            inner = [self._prlimit, f"--nproc={self.limits.max_processes}", "--"] if self._prlimit else []
            full += ["--", *inner, *argv]
            popen_env, popen_cwd, nproc = {}, None, None
        else:
            full, popen_env, popen_cwd = argv, environment, str(host_cwd)
            nproc = None if os.geteuid() == 0 else user_task_count(os.getuid()) + self.limits.max_processes
        launch, preexec = self._launcher(self.limits.rlimits(nproc=nproc), cgroup)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                [*launch, *full],
                stdin=subprocess.PIPE if data else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=popen_cwd,
                env=popen_env,
                start_new_session=True,
                preexec_fn=preexec,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            if cgroup:
                cgroup.remove()
            if isinstance(err, subprocess.SubprocessError) or (isinstance(err, OSError) and self.isolation == "bwrap"):
                raise SandboxError(f"could not launch the sandboxed command: {err}") from err
            code = 127 if isinstance(err, FileNotFoundError) else 126
            return ExecResult(code, "", f"sandbox: cannot start {argv[0]!r}: {err}", duration=time.monotonic() - start)
        oom_kills = 0
        running = (proc, run_id, cgroup)
        self._running.add(running)
        try:
            out, err, timed_out = self._communicate(proc, timeout, data, run_id, cgroup)
        finally:
            self._running.discard(running)
            self._kill_tree(proc, run_id, cgroup)
            proc.wait()
            if cgroup:
                oom_kills = cgroup.oom_kills()
                cgroup.remove()
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        if cgroup is not None and code == 125 and err.head.startswith(CGROUP_JOIN_FAILED.encode()):
            raise SandboxError(err.text().strip())
        if self.isolation == "bwrap" and code == 1 and out.total == 0 and err.head.startswith(b"bwrap: "):
            raise SandboxError(f"bubblewrap failed to start the command: {err.text().strip()}")
        return ExecResult(
            returncode=code,
            stdout=out.text(),
            stderr=with_note(err.text(), limit_note(self.limits, code, timed_out, timeout, oom_kills)),
            timed_out=timed_out,
            duration=time.monotonic() - start,
            truncated=out.truncated or err.truncated,
        )

    def read_file(self, path: str) -> bytes:
        """Bytes of ``path`` (relative to the workspace, or absolute under the workspace, /tmp or $HOME)."""
        host = self._resolved(path)
        return host.read_bytes()

    def write_file(self, path: str, data: str | bytes) -> None:
        """Create or replace ``path``; parents are created; a symlink is never written through."""
        host = self._host_path(self._inside_path(path))
        area = self._area_of(host)
        parent = host.parent
        parent.mkdir(parents=True, exist_ok=True)
        if not parent.resolve().is_relative_to(area.resolve()):
            raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        try:
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if host.is_symlink():
                raise ValueError(f"{path!r} is a symlink; refusing to write through it") from err
            raise
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)

    def close(self) -> None:
        """Kill commands still running, delete the workspace and everything in it; safe to call twice."""
        self._closed = True
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

    def _resolved(self, path: str) -> Path:
        host = self._host_path(self._inside_path(path))
        area = self._area_of(host)
        resolved = host.resolve()
        if not resolved.is_relative_to(area.resolve()):
            raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
        return resolved

    # -- launching ---------------------------------------------------------------------------

    def _argv(self, cmd: str | Sequence[str]) -> list[str]:
        if isinstance(cmd, str):
            return [self._shell, "-c", cmd]
        if isinstance(cmd, bytes):
            return [self._shell, "-c", cmd.decode("utf-8", errors="replace")]
        return [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in cmd]

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
        args += ["--ro-bind", _shared_etc(), "/etc"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--bind", str(self._root / "tmp"), INSIDE_TMP]
        args += ["--bind", str(self._root / "home"), INSIDE_HOME]
        args += ["--bind", str(self._root / "workspace"), INSIDE_WORKSPACE]
        args += ["--symlink", INSIDE_TMP, "/var/tmp"]
        for path in _python_roots():
            args += ["--ro-bind", path, path]
        for host, inside in self.binds_ro:
            args += ["--ro-bind", host, inside]
        args += ["--remount-ro", "/"]
        return args

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


def _python_roots() -> list[str]:
    """Host directories the running interpreter needs: prefixes, sys.path entries, editable packages."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    candidates += [p for p in sys.path if p and os.path.isabs(p)]
    for finder in sys.meta_path:  # setuptools editable installs map package names to source folders
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
        if isinstance(mapping, dict):
            candidates += [v for v in mapping.values() if isinstance(v, str)]
    own = (INSIDE_TMP, INSIDE_HOME, INSIDE_WORKSPACE, "/var/tmp")  # never hidden behind a host directory
    roots: list[str] = []
    for path in sorted({os.path.abspath(p) for p in candidates if os.path.isdir(p)}):
        if path == "/" or any(path == r or path.startswith(r.rstrip("/") + "/") for r in (*roots, *SYSTEM_DIRS)):
            continue
        if any(m == path or m.startswith(path.rstrip("/") + "/") for m in own):
            continue  # e.g. a script run from /tmp: binding /tmp would show the host's /tmp, read-only, inside
        roots.append(path)
    return roots


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
def _shared_etc() -> str:
    """A read-only ``/etc`` for every sandbox of this process: copies of the few host entries that
    commands need (no secrets: not shadow, not ssl/private) plus our own passwd and group.

    One bind mount instead of one per entry keeps each command's start-up cheap.
    """
    root = Path(tempfile.mkdtemp(prefix="claw-sandbox-etc-"))
    atexit.register(shutil.rmtree, root, True)
    for name in ETC_ENTRIES:
        src, dst = Path("/etc", name), root / name
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # an unreadable entry is left out, not fatal
            if src.is_dir() and not src.is_symlink():
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
    (root / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:claw sandbox:{INSIDE_HOME}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (root / "group").write_text(f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
    return str(root)


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


def _remove_tree(root: Path) -> None:
    """Delete ``root`` even when a command left directories without write permission."""

    def fix(func, path, _exc):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
        with contextlib.suppress(OSError):
            func(path)

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=fix)
    else:
        shutil.rmtree(root, onerror=fix)
