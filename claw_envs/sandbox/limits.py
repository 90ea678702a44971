"""Resource limits for sandboxed commands: rlimits set in the child, and a per-command cgroup.

rlimits bound one process (address space, CPU seconds, file size, open files). Two things they
cannot do are done by a cgroup when this host lets us create one (root with cgroup v1, or a
delegated cgroup v2 subtree): bound the *number of processes* for root, whose ``RLIMIT_NPROC`` the
kernel ignores, and bound the memory of all the command's processes together.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
DISK_QUOTA_NOTE = "[sandbox] disk quota exceeded"


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use."""

    memory_mb: int = 1024
    cpu_seconds: int = 30
    max_processes: int = 128
    max_file_mb: int = 64
    open_files: int = 1024
    disk_mb: int = 256  # the workspace, /tmp and home together (a per-sandbox tmpfs where the host allows)

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb", "open_files", "disk_mb"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def rlimits(self, *, nproc: int | None = None) -> list[tuple[int, int, int]]:
        """``(resource, soft, hard)`` for ``setrlimit``; ``nproc`` adds ``RLIMIT_NPROC``.

        The CPU hard limit is one second above the soft one, so a CPU hog first gets ``SIGXCPU``
        (which says why) and only then ``SIGKILL``.
        """
        triples = [
            (resource.RLIMIT_AS, self.memory_mb << 20, self.memory_mb << 20),
            (resource.RLIMIT_CPU, self.cpu_seconds, self.cpu_seconds + 1),
            (resource.RLIMIT_FSIZE, self.max_file_mb << 20, self.max_file_mb << 20),
            (resource.RLIMIT_NOFILE, self.open_files, self.open_files),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if nproc is not None:
            triples.append((resource.RLIMIT_NPROC, nproc, nproc))
        return triples


def clamp(triples: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The limits lowered to what this process may set (never above its current hard limits)."""
    clamped = []
    for res, soft, hard in triples:
        _cur_soft, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        clamped.append((res, soft, hard))
    return clamped


_PRLIMIT_NAMES = {
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_FSIZE: "fsize",
    resource.RLIMIT_NOFILE: "nofile",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_NPROC: "nproc",
}


def prlimit_options(triples: list[tuple[int, int, int]]) -> list[str]:
    """The same limits as options of util-linux ``prlimit`` (``--as=soft:hard`` ...)."""
    return [f"--{_PRLIMIT_NAMES[res]}={soft}:{hard}" for res, soft, hard in clamp(triples)]


def apply_rlimits(triples: list[tuple[int, int, int]]) -> None:
    """Set the limits in this process (a ``preexec_fn`` when the ``prlimit`` tool is missing)."""
    for res, soft, hard in clamp(triples):
        resource.setrlimit(res, (soft, hard))


def limit_note(
    limits: Limits, code: int, timed_out: bool, timeout: float, oom_kills: int = 0, disk_full: bool = False
) -> str:
    """A line for stderr that says which limit ended a command (or left the disk full), or ``""`` when none did."""
    if timed_out:
        return f"[sandbox] timed out after {timeout:g} s: the command and everything it started were killed\n"
    if oom_kills:
        return f"[sandbox] {oom_kills} process(es) killed: memory limit of {limits.memory_mb} MB exceeded\n"
    if disk_full:
        return f"{DISK_QUOTA_NOTE}: the workspace, /tmp and home may hold at most {limits.disk_mb} MB together\n"
    if code == 128 + signal.SIGXCPU:
        return f"[sandbox] killed: CPU time limit of {limits.cpu_seconds} s exceeded\n"
    if code == 128 + signal.SIGXFSZ:
        return f"[sandbox] killed: file size limit of {limits.max_file_mb} MB exceeded\n"
    return ""


def with_note(text: str, note: str) -> str:
    """``text`` with ``note`` appended on its own line."""
    if not note:
        return text
    return text + ("\n" if text and not text.endswith("\n") else "") + note


def user_task_count(uid: int) -> int:
    """Processes and threads owned by ``uid`` (what ``RLIMIT_NPROC`` counts outside a user namespace)."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count


class RunCgroup:
    """A fresh cgroup (pids + memory) for one command: attach in the child, kill and remove afterwards."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @classmethod
    def create(cls, limits: Limits) -> RunCgroup | None:
        """A new cgroup with the limits, or ``None`` when this host does not let us make one."""
        name = f"claw-{uuid.uuid4().hex[:12]}"
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return cls._create_v2(name, limits)
        return cls._create_v1(name, limits)

    @classmethod
    def _create_v1(cls, name: str, limits: Limits) -> RunCgroup | None:
        wanted = {
            "pids": ("pids.max", str(limits.max_processes)),
            "memory": ("memory.limit_in_bytes", str(limits.memory_mb << 20)),
        }
        dirs: list[Path] = []
        for controller, (knob, value) in wanted.items():
            base = CGROUP_ROOT / controller
            own = _own_cgroup(controller)
            if own is None or not (base / "cgroup.procs").exists():
                continue
            path = base / own.lstrip("/") / name
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / knob).write_text(value)
            except OSError:
                _rmdir(path)
                continue
            dirs.append(path)
        if not dirs or not dirs[0].is_relative_to(CGROUP_ROOT / "pids"):
            for path in dirs:
                _rmdir(path)
            return None  # without a process limit the cgroup is not worth its cost
        return cls(dirs)

    @classmethod
    def _create_v2(cls, name: str, limits: Limits) -> RunCgroup | None:
        own = _own_cgroup("")
        if own is None:
            return None
        parent = CGROUP_ROOT / own.lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if "pids" not in enabled:
            return None
        path = parent / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limits.max_processes))
            if "memory" in enabled:
                (path / "memory.max").write_text(str(limits.memory_mb << 20))
        except OSError:
            _rmdir(path)
            return None
        return cls([path])

    def procs_files(self) -> list[str]:
        """The files a process writes its pid to in order to join this cgroup."""
        return [str(path / "cgroup.procs") for path in self.dirs]

    def pids(self) -> set[int]:
        """The pids of the processes now in this cgroup."""
        found: set[int] = set()
        for path in self.dirs:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return found

    def oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the memory limit."""
        kills = 0
        for path in self.dirs:
            for name in ("memory.oom_control", "memory.events"):
                with contextlib.suppress(OSError):
                    for line in (path / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            kills += int(value)
        return kills

    def stop_all(self) -> None:
        """SIGSTOP every process in the cgroup, those that a stopping one started included."""
        stopped: set[int] = set()
        while pids := [pid for pid in self.pids() if pid not in stopped]:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            stopped.update(pids)

    def kill_all(self, wait: float = 2.0) -> None:
        """SIGKILL every process in the cgroup until it is empty (or ``wait`` seconds passed)."""
        deadline = time.monotonic() + wait
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Kill what is left, then delete the cgroup directories."""
        self.kill_all()
        for path in self.dirs:
            _rmdir(path)


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 ``controller`` (``""``: the v2 unified hierarchy)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _hid, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") if controller else controllers == "":
            return path
    return None


def _rmdir(path: Path, wait: float = 1.0) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)


@functools.cache
def cgroups_available() -> bool:
    """Whether this process may create the per-command pids cgroup (checked once)."""
    cgroup = RunCgroup.create(Limits())
    if cgroup is None:
        return False
    cgroup.remove()
    return True
