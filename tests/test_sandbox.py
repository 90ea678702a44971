"""Sandboxes: real bubblewrap runs, the rlimits-only opt-in, the docker no-engine error.

Every containment test checks the host afterwards: files that must not exist, a loopback listener
that must not have been reached, and /proc for processes that must not have survived.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
import time
import tracemalloc
import uuid
import warnings
from pathlib import Path

import gymnasium
import pytest

from claw_envs.sandbox import ExecResult, LocalSandbox, SandboxError, layout, make_sandbox
from claw_envs.sandbox import local as local_module
from claw_envs.sandbox.output import CappedOutput


def bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with LocalSandbox(isolation="bwrap"):
                return True
        except SandboxError:  # bubblewrap refused by the kernel: the sandbox fails closed
            return False


HAS_BWRAP = bwrap_works()
needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed or cannot create namespaces here")


def token() -> str:
    return f"clawtok{uuid.uuid4().hex[:12]}"


def unique_seconds() -> str:
    """A fraction of a second that is unique enough to find a ``sleep 30 <it>`` in /proc."""
    return f"0.{uuid.uuid4().int % 10**15:015d}"


def processes_with(tok: str) -> list[int]:
    """Host pids whose command line contains ``tok``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if tok.encode() in fh.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(tok: str) -> None:
    deadline = time.monotonic() + 3
    while processes_with(tok) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(tok) == [], f"processes of the sandboxed command survived: {processes_with(tok)}"


@pytest.fixture(scope="module")
def sb():
    if not HAS_BWRAP:
        pytest.skip("bubblewrap is not installed or cannot create namespaces here")
    box = LocalSandbox(isolation="bwrap", max_processes=48, memory_mb=512, output_limit=4096)
    yield box
    box.close()


# -- ordinary use ---------------------------------------------------------------------------------


def test_capped_output_keeps_head_and_tail():
    small = CappedOutput(10)
    small.feed(b"hello")
    assert (small.text(), small.truncated) == ("hello", False)
    big = CappedOutput(10)
    for chunk in (b"abcdefgh", b"ijklmnop", b"qrstuvwxyz"):
        big.feed(chunk)
    assert big.truncated
    text = big.text()
    assert text.startswith("abcde") and text.endswith("vwxyz")
    assert "output truncated: 16 of 26 bytes dropped" in text


@needs_bwrap
def test_runs_commands_in_the_workspace(sb):
    res = sb.run("pwd; id -un; echo oops >&2; exit 3")
    assert isinstance(res, ExecResult)
    assert (res.returncode, res.stdout, res.stderr, res.timed_out, res.truncated) == (
        3,
        "/workspace\nsandbox\n",
        "oops\n",
        False,
        False,
    )
    assert res.duration > 0 and not res.ok
    assert sb.run(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
    assert sb.run("cat", stdin="from stdin").stdout == "from stdin"
    assert sb.run("echo $GREETING", env={"GREETING": "hi there"}).stdout == "hi there\n"
    assert sb.run("mkdir -p sub/dir").ok
    assert sb.run("pwd", cwd="sub/dir").stdout == "/workspace/sub/dir\n"
    assert sb.run("kill -TERM $$").returncode == 128 + 15


@needs_bwrap
def test_the_workspace_can_sit_at_the_absolute_path_a_benchmark_expects():
    with LocalSandbox(workspace="/testbed") as box:
        box.write_file("/testbed/pkg/a.py", "x = 1\n")
        res = box.run("pwd && cat /testbed/pkg/a.py && test ! -e /workspace")
        assert (res.returncode, res.stdout) == (0, "/testbed\nx = 1\n")
        assert box.run("echo made > /testbed/out").ok and box.read_file("out") == b"made\n"


@pytest.mark.parametrize("path", ["testbed", "/", "/a/../b", "/usr/local/app", "/tmp", "/etc", "/home", "/proc/x"])
def test_a_workspace_path_that_would_hide_the_system_is_refused(path):
    with pytest.raises(ValueError, match="workspace"):
        LocalSandbox(workspace=path)


@needs_bwrap
def test_files_round_trip_between_host_and_commands(sb):
    sb.write_file("data/in.txt", "héllo\n")
    sb.write_file("/workspace/data/raw.bin", bytes(range(256)))
    assert sb.run("cat data/in.txt && wc -c < data/raw.bin").stdout == "héllo\n256\n"
    assert sb.run("echo made > data/out.txt").ok
    assert sb.read_file("data/out.txt") == b"made\n"
    assert sb.read_file("data/raw.bin") == bytes(range(256))
    assert sb.run("echo t > /tmp/t.txt").ok
    assert sb.read_file("/tmp/t.txt") == b"t\n"
    with pytest.raises(FileNotFoundError):
        sb.read_file("data/missing.txt")


@needs_bwrap
def test_the_python_interpreter_works_inside_with_installed_packages_read_only(sb):
    code = "import sys, gymnasium; print(sys.executable); print(gymnasium.__file__)"
    res = sb.run([sb.python, "-c", code])
    assert res.ok, res.stderr
    assert res.stdout.splitlines() == [sys.executable, gymnasium.__file__]
    res = sb.run([sb.python, "-c", "import claw_envs"])  # an editable install's sources live in the checkout
    assert "ModuleNotFoundError" in res.stderr
    assert sb.run("python -c 'print(6 * 7)'").stdout == "42\n"
    target = Path(sys.prefix) / f"claw-escape-{token()}"
    res = sb.run([sb.python, "-c", f"open({str(target)!r}, 'w').write('x')"])
    assert res.returncode != 0 and "Read-only file system" in res.stderr
    assert not target.exists()


async def test_arun_runs_commands_concurrently(sb):
    results = await asyncio.gather(*(sb.arun(f"echo {i}") for i in range(4)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]


@needs_bwrap
async def test_closing_a_sandbox_kills_the_commands_still_running():
    box = LocalSandbox(isolation="bwrap")
    tok = token()
    pending = asyncio.ensure_future(box.arun(f"exec -a {tok} sleep 1000", timeout=600))
    for _ in range(100):
        if processes_with(tok):
            break
        await asyncio.sleep(0.05)
    assert processes_with(tok), "the command never started"
    pending.cancel()  # what an env does when the pool cancels its step
    box.close()
    assert_nothing_left(tok)
    assert not box._root.exists()


# -- bad input ------------------------------------------------------------------------------------


@needs_bwrap
def test_bad_commands_come_back_as_results_not_exceptions(sb):
    assert sb.run("echo a\0b").returncode == 126
    assert sb.run([]).returncode == 127
    res = sb.run(["no-such-program-xyz"])
    assert res.returncode == 127 and "no-such-program-xyz" in res.stderr
    assert sb.run("no-such-program-xyz").returncode == 127
    res = sb.run("true", cwd="does/not/exist")
    assert res.returncode == 1 and "does not exist" in res.stderr
    assert sb.run(b"echo bytes ok").stdout == "bytes ok\n"


@needs_bwrap
def test_bad_arguments_from_env_code_raise_clearly(sb):
    with pytest.raises(ValueError, match="timeout"):
        sb.run("true", timeout=0)
    with pytest.raises(ValueError, match="outside"):
        sb.run("true", cwd="/etc")
    with pytest.raises(ValueError, match="outside"):
        sb.read_file("../../etc/passwd")
    with pytest.raises(ValueError, match="outside"):
        sb.write_file("/etc/claw-x", "x")
    with pytest.raises(ValueError, match="isolation"):
        LocalSandbox(isolation="chroot")
    with pytest.raises(ValueError, match="memory_mb"):
        LocalSandbox(memory_mb=0)
    with pytest.raises(ValueError, match="does not exist"):
        LocalSandbox(binds_ro=["/no/such/dir"])


@needs_bwrap
def test_symlinks_made_inside_cannot_leak_host_files(sb, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    assert sb.run(f"ln -sf {secret} leak && ln -sfn {tmp_path} leakdir").ok
    with pytest.raises(ValueError, match="outside"):
        sb.read_file("leak")
    with pytest.raises(ValueError, match="symlink"):
        sb.write_file("leak", "overwritten")
    with pytest.raises(ValueError, match="outside"):
        sb.write_file("leakdir/new.txt", "x")
    with pytest.raises(ValueError, match="outside"):
        sb.write_file("leakdir/sub/new.txt", "x")  # no folder is made on the host either
    assert secret.read_text() == "host secret"
    assert not (tmp_path / "new.txt").exists() and not (tmp_path / "sub").exists()
    assert sb.run("cat leak").returncode != 0  # the host path does not exist inside


def test_closed_sandbox_refuses_and_its_directory_is_gone():
    box = LocalSandbox()
    root = box._root
    assert box.run("mkdir -p locked/deep && touch locked/deep/f && chmod 000 locked/deep locked").ok
    box.close()
    box.close()
    assert not root.exists()
    with pytest.raises(SandboxError, match="closed"):
        box.run("true")


# -- safety: each case is contained and the host is checked afterwards -----------------------------


@needs_bwrap
def test_writes_outside_the_workspace_never_reach_the_host(sb):
    tok = token()
    home = os.path.expanduser("~")
    targets = {
        "tmp": f"/tmp/claw-escape-{tok}",
        "etc": f"/etc/claw-escape-{tok}",
        "home": f"{home}/claw-escape-{tok}",
        "usr": f"/usr/claw-escape-{tok}",
        "repo": str(Path(__file__).resolve().parent / f"claw-escape-{tok}"),
        "root": f"/claw-escape-{tok}",
    }
    script = "".join(f"echo x > {path} 2>/dev/null && echo wrote-{name}\n" for name, path in targets.items())
    script += f"cd .. && echo x > claw-escape-{tok} 2>/dev/null && echo wrote-parent\n"
    script += f"mount -o remount,rw / 2>/dev/null && echo x > /claw-escape-{tok} && echo remounted\n"
    script += "unshare --user --map-root-user true 2>/dev/null && echo nested-userns\n"
    res = sb.run(script)
    assert res.stdout == "wrote-tmp\n"  # /tmp is the sandbox's own
    assert sb.read_file(targets["tmp"]) == b"x\n"
    for path in [*targets.values(), str(Path(sb._root).parent / f"claw-escape-{tok}")]:
        assert not os.path.exists(path), f"the sandbox wrote {path} on the host"


@needs_bwrap
def test_a_host_tmp_on_sys_path_never_hides_the_sandboxes_own_tmp(monkeypatch):
    """A script run from /tmp puts /tmp on sys.path; the interpreter's folders are bound read-only inside, but
    /tmp must stay the sandbox's own: writable, and showing nothing of the host's /tmp."""
    tok = token()
    marker = Path(f"/tmp/claw-host-only-{tok}")
    marker.write_text("host")
    monkeypatch.syspath_prepend("/tmp")
    try:
        with LocalSandbox(isolation="bwrap") as box:
            res = box.run(f"ls /tmp; echo x > /tmp/mine-{tok} && echo wrote")
        assert res.ok and "wrote" in res.stdout, res
        assert marker.name not in res.stdout
        assert not Path(f"/tmp/mine-{tok}").exists()
    finally:
        marker.unlink()


@needs_bwrap
def test_no_network_neither_outside_nor_host_loopback():
    probe = (
        "import errno, socket, sys\n"
        "def attempt(addr):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect(addr); return 'connected'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode.get(e.errno, str(e))\n"
        "print(attempt(('127.0.0.1', int(sys.argv[1]))), attempt(('192.0.2.1', 80)))\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
    )
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        port = server.getsockname()[1]
        with LocalSandbox(isolation="bwrap") as box:
            res = box.run(["python", "-c", probe, str(port)])
        assert res.stdout.splitlines() == ["ECONNREFUSED ENETUNREACH", "['lo']"], res.stderr
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the host's listener
        with LocalSandbox(isolation="bwrap", network=True) as box:  # the control: the same probe, network on
            res = box.run(["python", "-c", probe, str(port)])
        assert res.stdout.split()[0] == "connected"
        server.setblocking(True)
        server.settimeout(5)
        conn, _ = server.accept()
        conn.close()


@needs_bwrap
def test_process_limit_holds(sb):
    tok = unique_seconds()
    spawn = (
        "import subprocess, sys\n"
        "n = 0\n"
        "try:\n"
        "    while n < 500:\n"
        "        subprocess.Popen(['sleep', '30', sys.argv[1]]); n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    res = sb.run(["python", "-c", spawn, tok], timeout=20)
    count, err = res.stdout.split()
    assert 0 < int(count) < sb.limits.max_processes and err == "11", res  # EAGAIN at the limit
    assert_nothing_left(tok)


@needs_bwrap
def test_fork_bomb_is_contained_and_leaves_nothing(sb):
    tok = token()
    started = time.monotonic()
    res = sb.run(f": {tok}; bomb() {{ bomb | bomb & }}; bomb; sleep 60", timeout=3)
    elapsed = time.monotonic() - started
    assert res.timed_out and res.returncode == 137
    assert "timed out after 3 s" in res.stderr
    assert elapsed < 3 + 10  # killed at its timeout, not when the host gave up
    assert_nothing_left(tok)
    assert sb.run("echo still usable").stdout == "still usable\n"


@needs_bwrap
def test_unbounded_memory_fails_inside_not_on_the_host(sb):
    res = sb.run(["python", "-c", "x = bytearray(8 << 30)"], timeout=20)
    assert res.returncode == 1 and "MemoryError" in res.stderr
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(32 << 20))\n"
    res = sb.run(["python", "-c", grow], timeout=20)
    assert res.returncode == 1 and "MemoryError" in res.stderr


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the per-command memory cgroup needs root")
def test_memory_of_all_processes_together_is_bounded():
    box = LocalSandbox(isolation="bwrap", memory_mb=256)
    try:
        if not box._cgroups_usable:
            pytest.skip("no writable memory cgroup on this host")
        hog = "python -c 'x = bytearray(150 << 20); import time; time.sleep(1); print(\"survived\")'"
        res = box.run(f"for i in 1 2 3 4; do {hog} & done; wait", timeout=30)
        assert res.stdout.count("survived") < 4
        assert "memory limit of 256 MB exceeded" in res.stderr
    finally:
        box.close()


@needs_bwrap
def test_printing_gigabytes_is_truncated_with_bounded_memory(sb):
    tracemalloc.start()
    try:
        res = sb.run("yes", timeout=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.timed_out and res.truncated
    assert res.stdout.startswith("y\ny\n") and "output truncated" in res.stdout
    assert len(res.stdout) < sb.output_limit + 200
    assert peak < 16 * sb.output_limit + (1 << 20)  # the gigabytes streamed through, never sat in memory
    flood = "import sys\nfor i in range(200000):\n    sys.stdout.write('line %d %s\\n' % (i, 'x' * 500))\n"
    res = sb.run(["python", "-c", flood], timeout=30)
    assert res.ok and res.truncated and not res.timed_out
    assert res.stdout.startswith("line 0 x") and res.stdout.endswith("line 199999 " + "x" * 500 + "\n")
    assert "output truncated" in res.stdout


@needs_bwrap
def test_commands_that_never_exit_are_killed_at_the_timeout(sb):
    tok = token()
    cases = {
        "sleep": f"exec -a {tok} sleep 1000",
        "ignores-sigterm": (
            f"python -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)' {tok}"
        ),
        "double-fork-daemon": (
            "python -c 'import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(1000)\n"
            "    os._exit(0)\n"
            f"time.sleep(1000)' {tok}"
        ),
    }
    for name, cmd in cases.items():
        res = sb.run(cmd, timeout=1)
        assert res.timed_out and res.returncode == 137, (name, res)
        assert "timed out after 1 s" in res.stderr
        assert_nothing_left(tok)


def test_a_command_killed_at_its_timeout_runs_nothing_after_its_first_child_dies(monkeypatch):
    """``sleep 5; echo x > f`` killed at its deadline once wrote f under CI load: the cgroup's processes were killed
    one at a time, and with host pids wrapped a child can come before its parent, whose shell then ran on. Every
    process is now stopped before any is killed; here the cgroup lists children first, as after a wrap."""
    signals: list[tuple[int, int]] = []
    real_kill, real_killpg = os.kill, os.killpg

    def kill(pid: int, signum: int) -> None:
        signals.append((pid, signum))
        real_kill(pid, signum)

    def killpg(pgid: int, signum: int) -> None:
        signals.append((-pgid, signum))
        real_killpg(pgid, signum)

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(os, "killpg", killpg)
    with LocalSandbox() as box:
        if box._cgroups_usable:
            pids = local_module.RunCgroup.pids
            monkeypatch.setattr(local_module.RunCgroup, "pids", lambda self: sorted(pids(self), reverse=True))
        res = box.run("for i in $(seq 20); do (sleep 5; echo $i >> after.txt) & done; wait", timeout=1)
        assert res.timed_out
        first_kill = next(i for i, (_pid, signum) in enumerate(signals) if signum == signal.SIGKILL)
        stopped = {pid for pid, signum in signals[:first_kill] if signum == signal.SIGSTOP}
        assert len(stopped) >= 40, signals[: first_kill + 1]  # the shell, its 20 subshells and their sleeps
        time.sleep(0.5)
        assert not (box._root / "workspace" / "after.txt").exists()


@needs_bwrap
def test_background_daemons_do_not_outlive_their_command(sb):
    tok = token()
    daemon = (
        "python -c 'import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(1000)\n"
        "    os._exit(0)\n"
        f'print("parent done")\' {tok}; sleep 1000 {tok} &'
    )
    res = sb.run(daemon, timeout=10)
    assert res.ok and not res.timed_out and res.stdout == "parent done\n"
    assert_nothing_left(tok)


@needs_bwrap
def test_cpu_time_and_file_size_limits_say_what_happened():
    with LocalSandbox(isolation="bwrap", cpu_seconds=1, max_file_mb=1) as box:
        res = box.run(["python", "-c", "while True: pass"], timeout=20)
        assert res.returncode == 128 + 24 and not res.timed_out
        assert "CPU time limit of 1 s exceeded" in res.stderr
        res = box.run("head -c 5M /dev/zero > big.bin", timeout=20)
        assert res.returncode != 0 and "file size limit" in res.stderr.lower()
        assert os.path.getsize(box._root / "workspace" / "big.bin") <= 1 << 20


@needs_bwrap
def test_limits_hold_without_the_prlimit_tool(monkeypatch):
    with LocalSandbox(isolation="bwrap", memory_mb=256, cpu_seconds=7) as box:
        monkeypatch.setattr(box, "_prlimit", None)  # then a preexec_fn sets the rlimits
        res = box.run("ulimit -v; ulimit -t")
        assert res.stdout.split() == [str(256 * 1024), "7"]


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="bubblewrap runs as another uid only when started as root")
def test_where_bwrap_cannot_run_as_nobody_it_runs_as_root_with_a_warning(monkeypatch):
    monkeypatch.setattr(local_module, "run_as_host_uid", lambda: ("/bin/false",))
    monkeypatch.setattr(layout, "_warned", set())
    with pytest.warns(RuntimeWarning, match="cannot run as uid 65534"):
        box = LocalSandbox(isolation="bwrap")
    with box:
        box.write_file("sub/in.txt", "x")
        assert box.run("cat sub/in.txt && echo y > sub/out.txt && id -u").stdout == "x1000\n"
        assert box.read_file("sub/out.txt") == b"y\n"


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="bubblewrap runs as another uid only when started as root")
def test_a_moments_refusal_to_start_as_nobody_is_retried_and_never_sticks(monkeypatch):
    """A loaded host can refuse one namespace: that sandbox retries, and no later sandbox falls back to root."""
    real_run = layout.subprocess.run
    refused = []

    def refuse_first_probe(argv, **kw):
        if argv[-1] == "true" and not refused:
            refused.append(argv)
            return layout.subprocess.CompletedProcess(argv, 1, "", "bwrap: Creating new namespace failed")
        return real_run(argv, **kw)

    monkeypatch.setattr(layout, "_started", set())
    monkeypatch.setattr(layout.subprocess, "run", refuse_first_probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        boxes = [LocalSandbox(isolation="bwrap") for _ in range(2)]
    assert refused
    for box in boxes:
        with box:
            assert box.run("echo y > out.txt").returncode == 0
            assert (box._root / "workspace" / "out.txt").stat().st_uid == layout.HOST_UID


# -- the rlimits opt-in, refusing without bubblewrap, and the other backend ----------------------------


def test_with_the_rlimits_opt_in_it_runs_with_rlimits_and_warns(monkeypatch):
    monkeypatch.setattr(layout, "_warned", set())
    with pytest.warns(RuntimeWarning, match="WITHOUT namespace isolation"):
        box = LocalSandbox(isolation="rlimits", max_processes=16, memory_mb=512)
    try:
        assert box.isolation == "rlimits-only"
        assert box.workspace == str(box._root / "workspace")
        res = box.run("pwd; ulimit -v; ulimit -t; echo $HOME")
        assert res.stdout.split() == [box.workspace, str(512 * 1024), "30", str(box._root / "home")]
        box.write_file("f.txt", "abc")
        assert box.run("cat f.txt").stdout == "abc"
        assert box.run(f": {'x' * 200_000}; echo long").stdout == "long\n"  # past the 128 KiB argument limit
        res = box.run(["python", "-c", "x = bytearray(4 << 30)"])
        assert "MemoryError" in res.stderr
        tok = token()
        daemon = (
            "python -c 'import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        time.sleep(1000)\n"
            "    os._exit(0)\n"
            f"time.sleep(1000)' {tok}"
        )
        res = box.run(daemon, timeout=1)
        assert res.timed_out
        assert_nothing_left(tok)  # the setsid'd grandchild is found by its environment marker
        tok = unique_seconds()
        spawn = "import subprocess, sys\nn = 0\ntry:\n    while n < 200:\n"
        spawn += "        subprocess.Popen(['sleep', '30', sys.argv[1]]); n += 1\nexcept OSError:\n    pass\nprint(n)\n"
        res = box.run(["python", "-c", spawn, tok], timeout=20)
        assert int(res.stdout) < 200
        assert_nothing_left(tok)
    finally:
        box.close()


def test_without_bwrap_on_path_auto_and_bwrap_refuse_and_name_the_fix(monkeypatch):
    monkeypatch.setattr(layout, "_warned", set())
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CLAW_SANDBOX_ISOLATION", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent fallback, not even a warned one
        for isolation in ("auto", "bwrap"):
            with pytest.raises(SandboxError, match=r"bubblewrap \(bwrap\) is not installed.*apt-get install"):
                LocalSandbox(isolation=isolation)


def test_make_sandbox_kinds():
    with make_sandbox("local") as box:
        assert isinstance(box, LocalSandbox)
    with pytest.raises(ValueError, match="local, docker"):
        make_sandbox("vm")


def test_docker_without_an_engine_names_the_cause(monkeypatch, tmp_path):
    pytest.importorskip("docker", reason="the docker SDK ([docker] extra) is not installed")
    import docker

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SandboxError, match="DockerException") as info:
        make_sandbox("docker")
    assert "local backend" in str(info.value)
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-engine.sock", version="1.44")
    with pytest.raises(SandboxError, match="ConnectionError") as info:
        make_sandbox("docker", client=client)
    assert "local backend" in str(info.value)


def test_a_spawned_process_already_reaped_is_not_signalled_by_its_number(sb, monkeypatch):
    spawned = sb.spawn(["sh", "-c", "exit 0"])
    deadline = time.monotonic() + 30
    while spawned.alive:  # polling reaps it: from here on its pid may be any new process's
        assert time.monotonic() < deadline
        time.sleep(0.01)
    groups: list[int] = []
    real_killpg = os.killpg
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: groups.append(pgid) or real_killpg(pgid, sig))
    spawned.kill()
    assert spawned.proc.pid not in groups
    live = sb.spawn(["sleep", "30"])  # one still running is killed by its group, as before
    live.kill()
    assert live.proc.pid in groups and live.proc.returncode == -signal.SIGKILL
