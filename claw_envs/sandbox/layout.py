"""What a bubblewrap sandbox shows inside: its fixed paths and user, the host folders bound read-only (the
system, a trimmed ``/etc``, the interpreter), and the bubblewrap command line that lays them out."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import posixpath
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

from claw_envs.sandbox.folders import new_folder, remove_folder, stage_bind

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

_warned: set[str] = set()


def checked_workspace(path: str) -> str:
    """``path`` if it can hold the workspace inside: absolute, normalised, and clear of the system, /tmp and home."""
    taken = (*SYSTEM_DIRS, "/etc", "/proc", "/dev", "/sys", INSIDE_TMP, "/var", "/home", "/root", *interpreter_dirs())
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        raise ValueError(f"workspace must be an absolute, normalised folder such as /testbed, got {path!r}")
    if _within(path, taken) or any(_within(system, (path,)) for system in taken):
        raise ValueError(f"workspace {path!r} would overlap {', '.join(taken)}")
    return path


def interpreter_dirs() -> list[str]:
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
            warn_once(f"LocalSandbox: {path} is not shown inside (it holds home, the working directory or /tmp).")
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
            mountpoint = shared_folder() / "binds" / str(len(_stages))
            stage_bind(host, mountpoint)
            _stages[host] = str(mountpoint)
        return _stages[host]


def reachable(host: str, *, as_other_uid: bool, stage_at: Path | None = None) -> str:
    """``host``, or where a read-only view of it is staged (``stage_at``, else a folder shared by this process's
    sandboxes) when bubblewrap runs ``as_other_uid`` and that uid cannot search the folders above ``host``."""
    if not as_other_uid or _searchable(host):
        return host
    if stage_at is None:
        return _staged(host)
    if not stage_at.exists():
        stage_bind(host, stage_at)
    return str(stage_at)


@functools.cache
def run_as_host_uid() -> tuple[str, ...]:
    """The ``setpriv`` prefix that starts bubblewrap as ``HOST_UID`` when this process is root, else ``()``."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        warn_once(
            "LocalSandbox: setpriv (util-linux) is missing, so bubblewrap runs as root and host files private "
            "to root are readable where a sandbox shows them."
        )
        return ()
    return (setpriv, f"--reuid={HOST_UID}", f"--regid={HOST_UID}", "--clear-groups", "--")


def normalise_binds(binds: Iterable[str | tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``binds_ro`` as ``(host, inside)`` pairs of absolute paths; a missing host path is a ``ValueError``."""
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
def shared_folder() -> Path:
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
def bwrap_help(bwrap: str) -> str:
    """``bwrap --help`` (which options this bubblewrap has), or ``""`` when it cannot be asked."""
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


_started: set[tuple[str, ...]] = set()
PROBE_TRIES = 3  # a busy host can refuse a namespace for a moment; a layout that never starts is refused each time


def probe(base: tuple[str, ...], root: Path) -> str | None:
    """``None`` when bubblewrap can start ``true`` with this layout, else the reason it cannot.

    Layouts differ only in this sandbox's own directories, so a layout shape that started once is not probed again.
    A failure is this sandbox's alone (never cached) and is retried, so a moment's refusal on a loaded host does
    not move this or later sandboxes to the weaker fallback.
    """
    shape = tuple(a.replace(str(root), "<root>") for a in base)
    if shape in _started:
        return None
    reason = ""
    for attempt in range(PROBE_TRIES):
        if attempt:
            time.sleep(0.25 * attempt)
        try:
            done = subprocess.run([*base, "--", "true"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as err:
            reason = str(err)
            continue
        if done.returncode == 0:
            _started.add(shape)
            return None
        reason = done.stderr.strip() or f"exit {done.returncode}"
    return reason


def bwrap_command(
    bwrap: str,
    *,
    root: Path,
    workspace: str,
    network: bool,
    disk_mb: int,
    binds_ro: Iterable[tuple[str, str]],
    as_other_uid: bool,
) -> list[str]:
    """The bubblewrap command line shared by every command of the sandbox whose folders are under ``root``.

    ``as_other_uid``: bubblewrap runs as :data:`HOST_UID`, so host folders it cannot reach are staged (see
    :func:`reachable`).
    """
    args = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += ["--cap-drop", "ALL", "--new-session", "--die-with-parent", "--hostname", SANDBOX_USER]
    if "--disable-userns" in bwrap_help(bwrap):
        args.append("--disable-userns")
    if network:
        args.append("--share-net")
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--ro-bind", str(shared_folder() / "etc"), "/etc"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if "--size" in bwrap_help(bwrap):  # bubblewrap >= 0.8
        args += ["--perms", "1777", "--size", str(disk_mb << 20), "--tmpfs", "/dev/shm"]
    args += ["--bind", str(root / "tmp"), INSIDE_TMP]
    args += ["--bind", str(root / "home"), INSIDE_HOME]
    args += ["--bind", str(root / "workspace"), workspace]
    args += ["--symlink", INSIDE_TMP, "/var/tmp"]
    for path in interpreter_dirs():
        args += ["--ro-bind", reachable(path, as_other_uid=as_other_uid), path]
    for i, (host, inside) in enumerate(binds_ro):
        args += ["--ro-bind", reachable(host, as_other_uid=as_other_uid, stage_at=root / "binds" / str(i)), inside]
    args += ["--remount-ro", "/"]
    return args


def warn_once(message: str) -> None:
    """A ``RuntimeWarning`` with ``message``, the first time this process says it."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
