"""Issue #41, closed doors: a local sandbox that cannot isolate refuses to run anything, and says why and how to fix it.

Real sandboxes and real envs, with bubblewrap taken off ``PATH`` (episodes run in a subprocess whose ``PATH`` holds
everything in /usr/bin but ``bwrap``) or replaced by a stand-in for a kernel that refuses user namespaces. A marker
file the test owns, outside any sandbox, shows whether the agent's command ran on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from claw_envs.sandbox import LocalSandbox, SandboxError, layout
from claw_envs.sandbox.isolation import ISOLATION_ENV, bubblewrap_refused
from claw_envs.toolcall import ToolCallEnv
from claw_envs.toolcall.env import tool_call_text

KERNEL_REFUSAL = (
    "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user "
    "namespaces"
)

# A terminal and a tool-call episode whose first action writes a marker file on the host (argv[1] + the family).
EPISODES = """
import json, sys, warnings
from claw_envs.terminal import TerminalEnv
from claw_envs.shell_turns import tool_call_text as bash
from claw_envs.toolcall import ToolCallEnv
from claw_envs.toolcall.env import tool_call_text as python

marker = sys.argv[1]
out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    episodes = (  # a built-in terminal task, not a task folder (those need bubblewrap whatever the opt-in)
        ("terminal", TerminalEnv(split="train", command_timeout=20.0), bash(f"touch {marker}.terminal")),
        ("toolcall", ToolCallEnv(split="test", tool_timeout=20.0), python(f"open({marker!r} + '.toolcall', 'w')")),
    )
    for name, env, action in episodes:
        try:
            env.reset(seed=0, options={"task_id": "greeting-file"} if name == "terminal" else None)
            _, _, _, truncated, info = env.step(action)
            out[name] = {"status": info["status"], "text": info["next_state"].text, "truncated": truncated}
        finally:
            env.close()
out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
print(json.dumps(out))
"""


def path_without_bwrap(folder: Path) -> str:
    """A ``PATH`` of this interpreter's folder and links to everything in /usr/bin except ``bwrap``: a host where
    bubblewrap is not installed."""
    folder.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if tool.name != "bwrap":
            (folder / tool.name).symlink_to(tool)
    path = f"{Path(sys.executable).parent}:{folder}"
    assert shutil.which("bwrap", path=path) is None
    return path


def fake_bwrap(folder: Path, message: str) -> str:
    """A folder holding a ``bwrap`` that prints ``message`` and exits 1: the stand-in for a kernel that refuses
    unprivileged user namespaces (a sysctl this test cannot change)."""
    folder.mkdir(mode=0o755)
    script = folder / "bwrap"
    script.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    script.chmod(0o755)
    return str(folder)


def play_episodes(tmp_path: Path, isolation: str | None) -> tuple[dict, Path]:
    """The two episodes in a subprocess without bubblewrap (``isolation``: its ``$CLAW_SANDBOX_ISOLATION``)."""
    env = {k: v for k, v in os.environ.items() if k != ISOLATION_ENV}
    env["PATH"] = path_without_bwrap(tmp_path / "bin")
    if isolation is not None:
        env[ISOLATION_ENV] = isolation
    marker = tmp_path / "host-marker"
    proc = subprocess.run(
        [sys.executable, "-c", EPISODES, str(marker)], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), marker


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(layout, "_warned", set())  # each test sees its own once-per-process warnings
    monkeypatch.setenv(ISOLATION_ENV, "auto")  # set (and so restored afterwards) whatever the test changes


def test_without_bubblewrap_terminal_and_toolcall_episodes_run_nothing_on_the_host(tmp_path):
    out, marker = play_episodes(tmp_path, None)
    for family in ("terminal", "toolcall"):
        step = out[family]
        assert step["status"] == "sandbox_failure" and step["truncated"], step  # masked, never the agent's fault
        text = step["text"]
        assert "bubblewrap (bwrap) is not installed" in text and "apt-get install bubblewrap" in text, text
        assert f"{ISOLATION_ENV}=rlimits" in text and "sandbox='docker'" in text
        assert not Path(f"{marker}.{family}").exists(), f"the {family} action ran on the host"
    assert not [w for w in out["warnings"] if "WITHOUT namespace isolation" in w]  # no silent (or warned) fallback


def test_the_environment_opt_in_runs_the_episodes_with_rlimits_and_warns(tmp_path):
    out, marker = play_episodes(tmp_path, "rlimits")
    for family in ("terminal", "toolcall"):
        assert out[family]["status"] == "ok", out[family]
        assert Path(f"{marker}.{family}").exists()  # rlimits only: the command acts on the host, as opted in
    opted = f"WITHOUT namespace isolation (opted in with {ISOLATION_ENV}=rlimits)"
    assert len([w for w in out["warnings"] if opted in w]) == 1  # once per process


def test_a_kernel_that_refuses_user_namespaces_is_named_with_its_fix(tmp_path, monkeypatch, fresh_warnings):
    monkeypatch.setenv("PATH", f"{fake_bwrap(tmp_path / 'fake', KERNEL_REFUSAL)}:{os.environ['PATH']}")
    with pytest.raises(SandboxError) as refused:
        LocalSandbox()
    message = str(refused.value)
    assert "\n" not in message
    assert f"refused by the kernel ({KERNEL_REFUSAL})" in message
    assert "kernel.unprivileged_userns_clone=1" in message and f"{ISOLATION_ENV}=rlimits" in message

    marker = tmp_path / "host-marker"
    env = ToolCallEnv(split="test", tool_timeout=20.0)
    try:
        env.reset(seed=0)
        _, _, _, truncated, info = env.step(tool_call_text(f"open({str(marker)!r}, 'w')"))
    finally:
        env.close()
    assert info["status"] == "sandbox_failure" and truncated
    assert "refused by the kernel" in info["next_state"].text and not marker.exists()


def test_a_bubblewrap_that_fails_otherwise_is_named_by_its_first_line():
    message = str(bubblewrap_refused("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\nmore\n"))
    assert "bubblewrap cannot start a sandbox here (bwrap: Can't mount proc on /newroot/proc" in message
    assert "more" not in message and "\n" not in message


def test_the_explicit_opt_in_runs_with_a_warning_and_bwrap_is_never_overridden(tmp_path, monkeypatch, fresh_warnings):
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path / "bin"))
    marker = tmp_path / "host-marker"
    with pytest.warns(RuntimeWarning, match="WITHOUT namespace isolation \\(opted in with isolation='rlimits'\\)"):
        box = LocalSandbox(isolation="rlimits")
    with box:
        assert box.isolation == "rlimits-only"
        assert box.run(f"touch {marker}").returncode == 0 and marker.exists()
    monkeypatch.setenv(ISOLATION_ENV, "rlimits")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(SandboxError, match="not installed"):
            LocalSandbox(isolation="bwrap")  # asked for by the code: the environment cannot weaken it
    monkeypatch.setenv(ISOLATION_ENV, "rlimit")
    with pytest.raises(ValueError, match=f"\\${ISOLATION_ENV} must be auto, bwrap or rlimits, got 'rlimit'"):
        LocalSandbox()


# -- the commands -----------------------------------------------------------------------------------


def claw_eval(capsys, tmp_path: Path, *args: str) -> tuple[int, str]:
    """``claw-eval --env toolcall`` grading one response (no sandbox needed): the exit code and what it printed."""
    from claw_train.commands.evaluate import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t1", "problem": "What is 2 + 2?", "answer": "4"}) + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"id": "t1", "response": "\\boxed{4}"}) + "\n")
    capsys.readouterr()
    options = ["--tasks", str(tasks), "--responses", str(responses), "--output-dir", str(tmp_path / "out")]
    code = main(["--env", "toolcall", *options, *args])
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


def test_claw_eval_says_the_opt_in_in_its_summary_and_sets_it_for_its_sandboxes(tmp_path, capsys, fresh_warnings):
    code, output = claw_eval(capsys, tmp_path)
    assert code == 0 and "sandbox:" not in output
    code, output = claw_eval(capsys, tmp_path, "--sandbox-isolation", "rlimits")
    assert code == 0, output
    assert "sandbox: rlimits only (no namespace isolation" in output and "opted in with --sandbox-isolation" in output
    assert os.environ[ISOLATION_ENV] == "rlimits"  # what every local sandbox of the run reads


def test_a_bad_isolation_variable_stops_the_command_before_it_runs(tmp_path, capsys, monkeypatch, fresh_warnings):
    monkeypatch.setenv(ISOLATION_ENV, "none")
    code, output = claw_eval(capsys, tmp_path)
    assert code == 2 and f"${ISOLATION_ENV} must be auto, bwrap or rlimits, got 'none'" in output


def test_ray_actors_get_the_same_isolation(monkeypatch, fresh_warnings):
    from claw_train.pipeline.cluster import actor_options

    monkeypatch.delenv(ISOLATION_ENV)
    assert "runtime_env" not in actor_options({})
    monkeypatch.setenv(ISOLATION_ENV, "rlimits")
    assert actor_options({})["runtime_env"] == {"env_vars": {ISOLATION_ENV: "rlimits"}}
