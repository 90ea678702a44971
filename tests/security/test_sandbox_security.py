"""Issue #16, the sandbox findings, each reproduced on the real bubblewrap sandbox: a disk quota, no host files
(root's home, a private folder, the checkout), no host unix socket, orphaned folders swept, long commands run.

Every test checks the host side too: disk usage, what a host server accepted, which folders and mounts remain.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
import warnings
from pathlib import Path

import pytest

from claw_envs.sandbox import LocalSandbox, SandboxError, layout
from claw_envs.sandbox.folders import OWNER, remove_folder, sweep_orphans
from claw_envs.shell_turns import report

CHECKOUT = Path(__file__).resolve().parents[2]
MB = 1 << 20


def _bwrap_reason() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with LocalSandbox(isolation="bwrap"):
                return None
        except SandboxError as err:  # the sandbox fails closed where the kernel refuses bubblewrap
            return str(err)


BWRAP_REASON = _bwrap_reason()
pytestmark = pytest.mark.skipif(BWRAP_REASON is not None, reason=str(BWRAP_REASON))
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the disk quota (a tmpfs mount) and the uid switch need root")


def token() -> str:
    return f"claw{uuid.uuid4().hex[:12]}"


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4] for line in fh if line.split()[4].startswith(str(path))]


def visible_under(folder: Path) -> set[str]:
    """What a sandbox may show in ``folder``: the first step towards each interpreter folder bound inside."""
    dirs = [Path(d) for d in layout.interpreter_dirs()]
    return {d.relative_to(folder).parts[0] for d in dirs if d.is_relative_to(folder) and d != folder}


# -- disk quota ---------------------------------------------------------------------------------------


@needs_root
def test_a_sandbox_cannot_write_more_than_its_quota():
    with LocalSandbox(isolation="bwrap", disk_mb=16) as box:
        assert box.disk_capped
        disk_before = shutil.disk_usage(box._root.parent).used
        flood = (
            "for i in $(seq 40); do head -c 50M /dev/zero > /tmp/flood$i; done\n"  # 2 GB asked for
            "dd if=/dev/zero of=big.bin bs=1M count=100 2>/dev/null\n"
            "head -c 50M /dev/zero > ~/h; head -c 50M /dev/zero > /dev/shm/s\n"
            "exit 1\n"
        )
        res = box.run(flood, timeout=120)
        held = sum(f.stat().st_size for f in box._root.rglob("*") if f.is_file())
        assert held <= 16 * MB
        assert shutil.disk_usage(box._root.parent).used - disk_before < 1024 * MB  # nothing near 2 GB reached the disk
        assert "No space left on device" in res.stderr
        assert "[sandbox] disk quota exceeded" in res.stderr and "at most 16 MB" in res.stderr
        directive = report(res, timeout=120, max_chars=4000).directive
        assert directive and "disk quota exceeded" in directive and "16 MB" in directive
        with pytest.raises(OSError, match="No space left"):
            box.write_file("from-host.bin", b"x" * 16 * MB)  # the host's writes count against the same cap
        assert box.run("rm -f /tmp/flood* big.bin ~/h from-host.bin && echo fits > small.txt").ok  # the agent recovers
        assert box.read_file("small.txt") == b"fits\n"


# -- host files ---------------------------------------------------------------------------------------


def make_private_home(folder: Path) -> Path:
    """A folder laid out like $HOME: a private key, a private file, and one public file as the control."""
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    (home / ".ssh").chmod(0o700)
    (home / "secret.txt").write_text("secret")
    (home / "secret.txt").chmod(0o600)
    (home / "public.txt").write_text("public")
    (home / "public.txt").chmod(0o644)
    home.chmod(0o755)
    return home


def test_a_home_the_process_runs_from_is_not_shown(tmp_path, monkeypatch):
    """``python -m`` started in $HOME puts $HOME on sys.path; none of it may appear inside."""
    home = make_private_home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.syspath_prepend("")
    with LocalSandbox(isolation="bwrap") as box:
        res = box.run(f"ls -A {home} || echo absent; cat {home}/public.txt; python -c 'import gymnasium; print(1)'")
    assert res.stdout.split() == ["absent", "1"], res


@needs_root
def test_private_files_in_a_shown_folder_stay_unreadable(tmp_path):
    home = make_private_home(tmp_path)
    with LocalSandbox(isolation="bwrap", binds_ro=[(str(home), "/home/alice")]) as box:
        assert box.run("cat /home/alice/public.txt && echo x > mine.txt").stdout == "public"
        assert (box._root / "workspace" / "mine.txt").stat().st_uid == layout.HOST_UID  # not host root
        for command in ("cat /home/alice/secret.txt", "cat /home/alice/.ssh/id_ed25519", "ls /home/alice/.ssh"):
            res = box.run(command)
            assert res.returncode != 0 and "Permission denied" in res.stderr, (command, res)
            assert "PRIVATE" not in res.stdout and "secret" not in res.stdout


def test_root_home_is_not_shown():
    real_home = Path(os.path.expanduser("~"))
    planted = real_home / f".claw-private-{token()}"
    planted.write_text("secret")
    planted.chmod(0o600)
    try:
        with LocalSandbox(isolation="bwrap") as box:
            for folder in {real_home, Path("/root")}:  # at most the way to an interpreter installed there
                assert set(box.run(f"ls -A {folder}").stdout.split()) <= visible_under(folder)
            res = box.run(f"cat {planted} || ls /root/.ssh")
        assert res.returncode != 0 and "secret" not in res.stdout and "No such file" in res.stderr, res
    finally:
        planted.unlink()


def test_the_checkout_is_not_shown_even_from_inside_it(monkeypatch):
    monkeypatch.chdir(CHECKOUT)
    monkeypatch.syspath_prepend(str(CHECKOUT))
    with LocalSandbox(isolation="bwrap") as box:
        res = box.run(
            f"ls -A {CHECKOUT}; for f in pyproject.toml .git claw_envs tests; do test -e {CHECKOUT}/$f && echo $f; done"
        )
        assert set(res.stdout.split()) <= visible_under(CHECKOUT), res  # at most the venv, when it lives there
        assert box.run([box.python, "-c", "import gymnasium"]).ok


# -- host sockets -------------------------------------------------------------------------------------


@needs_root
def test_a_host_unix_socket_is_not_reachable(tmp_path, monkeypatch):
    shared, private = tmp_path / "shared", tmp_path / "cwd"
    shared.mkdir(mode=0o755)
    private.mkdir()
    monkeypatch.chdir(private)
    name = token()
    servers = []
    for path in (shared / "agent.sock", private / "agent.sock"):
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        path.chmod(0o600)  # a private socket, as ssh-agent and most daemons make theirs
        servers.append(server)
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + name)
    servers.append(abstract)
    probe = (
        "import socket, sys\n"
        "def attempt(addr):\n"
        "    s = socket.socket(socket.AF_UNIX); s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(addr); return 'connected'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "print(*(attempt(a) for a in sys.argv[1:-1]), attempt('\\0' + sys.argv[-1]))\n"
    )
    try:
        for server in servers:
            server.listen()
            server.setblocking(False)
        with LocalSandbox(isolation="bwrap", binds_ro=[str(shared)]) as box:
            res = box.run(["python", "-c", probe, str(shared / "agent.sock"), str(private / "agent.sock"), name])
        assert res.stdout.split() == ["PermissionError", "FileNotFoundError", "ConnectionRefusedError"], res
        for server in servers:
            with pytest.raises(BlockingIOError):
                server.accept()  # nothing reached any host listener
    finally:
        for server in servers:
            server.close()


# -- orphaned folders ---------------------------------------------------------------------------------

CHILD = (
    "import sys, time, warnings\n"
    "warnings.simplefilter('ignore')\n"
    "from claw_envs.sandbox import LocalSandbox\n"
    "box = LocalSandbox(isolation='bwrap')\n"
    "print(box._root, flush=True)\n"
    "if sys.argv[1] == 'stay':\n"
    "    time.sleep(600)\n"
    "box.close()\n"
)


def start_child(mode: str) -> tuple[subprocess.Popen, Path]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True, cwd=CHECKOUT)
    return child, Path(child.stdout.readline().strip())


def test_orphaned_folders_are_swept_on_start_and_live_ones_kept(tmp_path):
    killed, killed_root = start_child("stay")
    alive, alive_root = start_child("stay")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert killed_root.is_dir()  # what a killed parent leaves behind, mounted quota included
        reused = tmp_path / "claw-sandbox-reused"  # our pid, but a start time of an earlier process
        reused.mkdir()
        (reused / OWNER).write_text(f"{os.getpid()} 1 {os.readlink('/proc/self/ns/pid')}\n")
        unknown = tmp_path / "claw-sandbox-unknown"  # no owner record (being made, or from an older version)
        unknown.mkdir()
        with LocalSandbox(isolation="bwrap") as own:
            fresh, _ = start_child("leave")  # a new process sweeps when its first sandbox starts
            fresh.wait(timeout=60)
            assert not killed_root.exists() and mounts_under(killed_root) == []
            assert alive_root.is_dir() and own._root.is_dir()
            assert sweep_orphans(str(tmp_path)) == [reused]
            assert unknown.is_dir() and own._root.is_dir()
    finally:
        alive.kill()
        alive.wait()
    sweep_orphans()  # ours, or a sandbox another test starts meanwhile: either way the dead owner's folder goes
    assert not alive_root.exists() and mounts_under(alive_root) == []


def test_a_folder_that_vanishes_during_a_sweep_is_skipped(tmp_path, monkeypatch):
    """Listed, then removed (its owner closed it, or another process swept it) before the sweep looked at it."""
    from claw_envs.sandbox import folders

    for name in ("claw-sandbox-gone", "claw-sandbox-dead"):
        (tmp_path / name).mkdir()
        (tmp_path / name / OWNER).write_text(f"{os.getpid()} 1 {os.readlink('/proc/self/ns/pid')}\n")
    listed = sorted(os.scandir(tmp_path), key=lambda entry: entry.name)
    shutil.rmtree(tmp_path / "claw-sandbox-gone")
    scandir = os.scandir
    monkeypatch.setattr(folders.os, "scandir", lambda path: iter(listed) if path == str(tmp_path) else scandir(path))
    assert sweep_orphans(str(tmp_path)) == [tmp_path / "claw-sandbox-dead"]
    assert list(tmp_path.iterdir()) == []


def test_removing_a_folder_never_changes_modes_outside_it(tmp_path):
    """Removal makes only the folder's own directories writable: a folder another process swept first leaves its
    parent as it was (it once made the temp dir 0700, which stopped every later sandbox starting as nobody), and
    a symlink in a read-only directory leaves the host file it names as it was."""
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)
    remove_folder(parent / "claw-sandbox-gone")
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755

    host_file = tmp_path / "host.txt"
    host_file.write_text("host")
    host_file.chmod(0o644)
    folder = parent / "claw-sandbox-left"
    (folder / "locked").mkdir(parents=True)
    (folder / "locked" / "link").symlink_to(host_file)
    (folder / "locked" / "sub").mkdir()
    (folder / "locked" / "sub").chmod(0o000)
    (folder / "locked").chmod(0o555)
    remove_folder(folder)
    assert not folder.exists()
    assert stat.S_IMODE(host_file.stat().st_mode) == 0o644 and host_file.read_text() == "host"
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(Path(tempfile.gettempdir()).stat().st_mode) & 0o001  # others may still traverse it


# -- long commands ------------------------------------------------------------------------------------


def test_a_200_kib_command_runs():
    line = "x" * 1023 + "\n"
    command = f"cat > big.txt <<'EOF'\n{line * 200}EOF\nwc -c < big.txt"
    assert len(command.encode()) > 200 * 1024
    with LocalSandbox(isolation="bwrap") as box:
        res = box.run(command, timeout=30)
        assert res.ok and res.stdout == f"{200 * 1024}\n", res
        assert box.read_file("big.txt") == (line * 200).encode()
        res = box.run(f"echo {'y' * 200 * 1024} | wc -c; exit 3")
        assert (res.returncode, res.stdout) == (3, f"{200 * 1024 + 1}\n")
        res = box.run(["echo", "z" * 200 * 1024])  # one argv entry over the kernel's 128 KiB: the agent's error
        assert res.returncode == 126 and "too long" in res.stderr
