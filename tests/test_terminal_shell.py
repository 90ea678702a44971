"""The persistent shell on the real bubblewrap sandbox: ``cd``, variables and background jobs carry across turns,
a shell that dies or times out is restarted and the agent told, nothing is left after ``close()``; one-shot mode
stays available; per-command binds and ``spawn`` of the sandbox underneath."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest
from test_sandbox import needs_bwrap

from claw_envs.sandbox import Bind, LocalSandbox, SandboxError
from claw_envs.sandbox.shell import PersistentShell, ansi_c_quote
from claw_envs.shell_turns import tool_call_text
from claw_envs.terminal import TerminalEnv

pytestmark = needs_bwrap
BASH = tool_call_text


@pytest.fixture
def env():
    e = TerminalEnv(split="train", command_timeout=2.0, sandbox_options={"isolation": "bwrap"})
    e.reset(options={"task_id": "greeting-file"})
    yield e
    e.close()


def run(env: TerminalEnv, command: str) -> tuple[str, object]:
    obs, _, _, _, info = env.step(BASH(command))
    assert info["status"] == "ok", obs
    return obs, info["next_state"]


def processes_with(needle: str) -> list[int]:
    """Host pids whose command line holds ``needle`` (its words as separate arguments)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle.replace(" ", "\0").encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if pid != os.getpid()]


def wait_for(needle: str, count: int = 1, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while len(found := processes_with(needle)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def wait_until_gone(needle: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := processes_with(needle)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_cd_variables_functions_and_jobs_carry_across_turns(env):
    assert run(env, "mkdir -p a/b && cd a/b && export NAME=ana && COUNT=3 && hi() { echo hi $1; }")[0] == "returncode=0"
    assert run(env, "pwd; echo $NAME $COUNT; hi you")[0] == "/workspace/a/b\nana 3\nhi you\nreturncode=0"
    assert run(env, "sleep 30 & echo started")[0] == "started\nreturncode=0"
    assert run(env, "jobs | grep -c 'sleep 30'")[0] == "1\nreturncode=0"
    assert run(env, "echo 'hello, world' > ../../greeting.txt")[0] == "returncode=0"
    assert env.step("done")[1] == 1.0


def test_one_shot_mode_starts_each_command_afresh():
    env = TerminalEnv(split="train", shell="oneshot")
    try:
        env.reset(options={"task_id": "greeting-file"})
        run(env, "mkdir d && cd d && export X=1")
        assert run(env, 'pwd; echo "[$X]"')[0] == "/workspace\n[]\nreturncode=0"
    finally:
        env.close()
    with pytest.raises(ValueError, match="needs the local sandbox"):
        TerminalEnv(sandbox="docker", shell="persistent")
    with pytest.raises(ValueError, match="'persistent' or 'oneshot'"):
        TerminalEnv(shell="tmux")


@pytest.mark.parametrize("killer", ["exit 3", "kill -9 $$", "exec true", "set -e; false"])
def test_a_shell_that_dies_is_restarted_and_the_agent_is_told(env, killer):
    run(env, "mkdir -p sub && cd sub && export KEEP=1")
    obs, _, _, _, info = env.step(BASH(killer))
    ns = info["next_state"]
    assert info["shell_restarts"] == 1 and "the shell itself exited" in obs
    assert "a new shell starts with your next command in /workspace/sub" in obs
    assert ns.directive and "shell was restarted" in ns.directive
    assert run(env, 'pwd; echo "[${KEEP:-}]"')[0] == "/workspace/sub\n[]\nreturncode=0"


def test_a_command_past_its_timeout_kills_the_shell_and_its_jobs_and_a_new_one_starts(env):
    run(env, "cd /tmp; sleep 4040 &")
    obs, ns = run(env, "echo before; sleep 5")
    assert ns.evaluative.score == -1.0 and "timeout" in ns.evaluative.tags and obs.startswith("before\n")
    assert "ran longer than the 2-second limit" in obs and "the shell was killed with everything it started" in obs
    assert not wait_until_gone("sleep 4040")
    assert run(env, "pwd; jobs")[0] == "/tmp\nreturncode=0"


def test_reading_stdin_returns_at_once_instead_of_eating_the_next_command(env):
    # a read that waited would end at the 2 s limit instead: "ran longer than the 2-second limit", no returncode
    assert run(env, "cat; read line; echo read=$?")[0] == "read=1\nreturncode=0"
    assert run(env, "echo still here")[0] == "still here\nreturncode=0"


def test_nothing_is_left_running_after_close_or_the_end_of_an_episode(env):
    run(env, "setsid nohup sleep 4141 >/dev/null 2>&1 & (trap '' HUP TERM; sleep 4142) >/dev/null 2>&1 & disown")
    assert len(wait_for("sleep 414", 2)) == 2
    env.step(BASH("echo 'hello, world' > greeting.txt"))
    assert env.step("done")[1] == 1.0  # the episode ends: the agent's processes end before the check
    assert not wait_until_gone("sleep 414")
    env.reset(options={"task_id": "greeting-file"})
    run(env, "nohup sleep 4343 >/dev/null 2>&1 &")
    assert wait_for("sleep 4343")
    env.close()
    assert not wait_until_gone("sleep 4343")


def test_filling_the_disk_is_a_clear_next_state_and_the_shell_goes_on():
    # The quota, not the time limit, must end the writes however slow the machine: a small quota and a limit that
    # writing 50 MB never reaches (the 2-second one of `env` fired first under load, writing 300 MB).
    env = TerminalEnv(split="train", command_timeout=120.0, sandbox_options={"isolation": "bwrap", "disk_mb": 32})
    try:
        env.reset(options={"task_id": "greeting-file"})
        obs, ns = run(env, "for i in 1 2 3 4; do head -c 10M /dev/zero > big$i; done; head -c 10M /dev/zero > big5")
        assert "No space left on device" in obs and ns.evaluative.score == -1.0 and "timeout" not in ns.evaluative.tags
        assert run(env, "rm big* && echo freed")[0] == "freed\nreturncode=0"
    finally:
        env.close()


def test_odd_and_long_commands_reach_the_shell_unchanged(env):
    odd = "printf '%s|' \"a b\" 'c'\"'\"'d' $'\\t' é 😀 '$HOME' \\\\ ; echo"
    assert run(env, odd)[0] == "a b|c'd|\t|é|😀|$HOME|\\|\nreturncode=0"
    body = "x" * 60_000
    assert run(env, f"cat > long.txt <<'EOF'\n{body}\nEOF\nwc -c < long.txt")[0] == "60001\nreturncode=0"
    assert ansi_c_quote("a'b\n") == "$'a\\x27b\\x0a'"


def test_output_after_a_command_ends_goes_to_the_next_one():
    with LocalSandbox() as box:
        shell = PersistentShell(box)
        first = shell.run("(sleep 0.3; echo late; exec sleep 4747) & echo now", timeout=5)
        assert first.result.stdout == "now\n" and first.note is None
        assert wait_for("sleep 4747", seconds=60)  # "late" is written (a fixed 0.6 s wait raced a loaded machine)
        assert shell.run("echo next", timeout=5).result.stdout == "late\nnext\n"
        shell.close()
        assert not shell.alive


def test_per_command_binds_are_seen_only_by_that_command(tmp_path):
    with LocalSandbox(workspace="/app") as box:
        shown = box.host_folder("shown")
        (shown / "a.txt").write_text("secret\n")
        (shown / "a.txt").chmod(0o644)
        out = box.host_folder("out", writable=True)
        binds = [Bind(str(shown), "/tests"), Bind(str(out), "/logs/verifier", writable=True)]
        done = box.run("cat /tests/a.txt; echo x > /tests/b; echo 1 > /logs/verifier/r", binds=binds)
        assert done.stdout == "secret\n" and "Read-only file system" in done.stderr
        assert (out / "r").read_text() == "1\n" and not (shown / "b").exists()
        later = box.run("ls /tests /logs")
        assert later.returncode != 0 and "No such file or directory" in later.stderr
        spawned = box.spawn(["sleep", "4545"])
        assert spawned.alive and wait_for("sleep 4545")
    assert not spawned.alive and not wait_until_gone("sleep 4545")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the no-isolation warning, said once per process
        plain = LocalSandbox(isolation="rlimits")
    with plain, pytest.raises(SandboxError, match="binds for one command need bubblewrap"):
        plain.run("true", binds=[Bind(str(tmp_path), "/x")])
