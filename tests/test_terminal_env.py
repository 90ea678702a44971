"""claw/Terminal-v0 on the real bubblewrap sandbox: every built-in task solved by its script, signals,
every bad input, JSONL tasks, seeding, and one `claw-train --env terminal` run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from test_sandbox import needs_bwrap

import claw_envs
from claw_envs.shell_turns import fenced_text, read_turn, tool_call_text
from claw_envs.terminal import TerminalEnv
from claw_envs.terminal.tasks import BUILTIN, builtin_folders, builtin_tasks, load_tasks

pytestmark = needs_bwrap

BASH = tool_call_text


@pytest.fixture
def env():
    e = TerminalEnv(split="train", command_timeout=2.0, sandbox_options={"isolation": "bwrap"})
    yield e
    e.close()


def start(env: TerminalEnv, task_id: str = "greeting-file") -> None:
    env.reset(options={"task_id": task_id})


def test_registered_listed_and_made_through_gymnasium():
    assert claw_envs.resolve_id("terminal") == "claw/Terminal-v0" and "claw/Terminal-v0" in claw_envs.env_ids()
    env = gym.make("claw/Terminal-v0", split="test")
    obs, info = env.reset(seed=1)
    assert [m["role"] for m in info["messages"]] == ["system", "user"] and obs == info["messages"][1]["content"]
    assert info["tools"][0]["function"]["name"] == "bash" and '"name": "bash"' in info["messages"][0]["content"]
    env.close()
    from typer.testing import CliRunner

    from claw_train.commands import envs

    listed = CliRunner().invoke(envs.app, ["list"])
    assert listed.exit_code == 0 and "claw/Terminal-v0" in listed.output


def test_check_env_passes():
    env = TerminalEnv(split="test")
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.parametrize("task_id", sorted(BUILTIN))
def test_each_built_in_task_is_solved_by_its_scripted_solution(task_id):
    split = "train" if task_id in {t.id for t in builtin_tasks("train")} else "test"
    env = TerminalEnv(split=split)
    try:
        env.reset(options={"task_id": task_id})
        for command in BUILTIN[task_id]["solution"]:
            obs, reward, terminated, truncated, info = env.step(BASH(command))
            ns = info["next_state"]
            assert (ns.role, ns.evaluative.score, terminated, reward) == ("tool", 0.5, False, 0.0), obs
            assert "returncode=0" in ns.evaluative.tags and obs.endswith("returncode=0")
        obs, reward, terminated, truncated, info = env.step("Done: the task is complete.")
        ns = info["next_state"]
        assert (ns.outcome, reward, terminated, truncated, ns.role) == (1.0, 1.0, True, False, "environment"), obs
        assert ns.evaluative.score == 1.0 and "tests=1/1" in ns.evaluative.tags and ns.directive is None
    finally:
        env.close()


def test_the_check_fails_when_the_task_is_not_done(env):
    start(env)
    _, _, _, _, info = env.step(fenced_text("echo 'hello world' > greeting.txt"))  # missing comma
    obs, reward, terminated, _, info = env.step("I wrote the greeting, all done.")
    ns = info["next_state"]
    assert (ns.outcome, reward, terminated, ns.evaluative.score) == (0.0, 0.0, True, -1.0)
    assert "tests=0/1" in ns.evaluative.tags and obs.startswith("Check failed") and "not done" in ns.directive


def test_fenced_and_openai_actions_run_and_are_stored_as_the_model_wrote_them(env):
    start(env)
    _, _, _, _, info = env.step("Let me look.\n```bash\npwd\n```")
    assert info["next_state"].text == "/workspace\nreturncode=0"
    assert info["messages"][-2:] == [
        {"role": "assistant", "content": "Let me look.\n```bash\npwd\n```"},
        {"role": "user", "content": "/workspace\nreturncode=0"},
    ]
    call = {"id": "c7", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    _, _, _, _, info = env.step(json.dumps({"content": "", "tool_calls": [call]}))
    assert info["messages"][-2]["tool_calls"] == [call]
    assert info["messages"][-1] == {"role": "tool", "tool_call_id": "c7", "name": "bash", "content": "returncode=0"}


def test_judge_inputs_are_what_the_terminal_prompt_declares(env):
    from judges.prompts import load

    start(env)
    env.step(BASH("ls"))
    _, _, _, _, info = env.step(BASH("cat nope.txt"))
    ns = info["next_state"]
    fields = load("prm_terminal")[1]
    assert set(ns.judge_inputs) == set(fields.required) | set(fields.optional)
    assert ns.judge_inputs["task"] == BUILTIN["greeting-file"]["instruction"]
    assert "ls" in ns.judge_inputs["history"] and ns.judge_inputs["result"] == ns.text
    assert ns.evaluative.tags == ("returncode=1",)
    assert ns.directive.startswith("`cat: nope.txt: No such file or directory` — that path does not exist")


@pytest.mark.parametrize(
    ("action", "tag", "said"),
    [
        ("<tool_call>{'name': 'bash'}</tool_call>", "bad_json", "not valid JSON"),
        ('<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>', "unknown_tool", "no tool named"),
        ('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>', "bad_arguments", "'command'"),
        (BASH("ls") + BASH("pwd"), "several_commands", "2 commands"),
        (BASH("ls") + "\n" + fenced_text("pwd"), "several_commands", "2 commands"),
        ("```bash\nls\n```\n```sh\npwd\n```", "several_commands", "2 commands"),
        ("```bash\nls -la", "unclosed_block", "never closed"),
        (BASH("   "), "empty_command", "empty"),
        ("", "empty_action", "empty"),
        (" \n ... ", "empty_action", "empty"),
    ],
)
def test_unreadable_turns_are_clear_next_states_and_nothing_runs(env, action, tag, said):
    start(env)
    obs, reward, terminated, truncated, info = env.step(action)
    ns = info["next_state"]
    assert (ns.role, ns.evaluative.score, ns.evaluative.tags, reward) == ("environment", -1.0, (tag,), 0.0)
    assert said in obs and "Nothing was run" in obs and said in ns.directive
    assert not terminated and not truncated and info["status"] == "ok" and env._commands == 0
    _, _, _, _, info = env.step(BASH("echo fine"))  # the episode goes on
    assert info["next_state"].text == "fine\nreturncode=0"


def test_a_command_that_never_exits_is_killed_with_a_clear_next_state(env):
    start(env)
    obs, _, terminated, _, info = env.step(BASH("sleep 600"))
    ns = info["next_state"]
    assert (ns.role, ns.evaluative.score, terminated, info["status"]) == ("tool", -1.0, False, "ok")
    assert "timeout" in ns.evaluative.tags and "2-second limit" in obs and "did not finish within 2 s" in ns.directive
    assert env.step(BASH("echo alive"))[0] == "alive\nreturncode=0"


def test_huge_output_is_capped_and_says_so(env):
    start(env)
    obs, _, _, _, info = env.step(BASH("seq 1 2000000"))
    ns = info["next_state"]
    assert len(obs) < 3000 and obs.startswith("1\n2\n") and "2000000" in obs and "was cut" in obs
    assert ns.evaluative.score == 0.0 and "output_truncated" in ns.evaluative.tags and "head" in ns.directive


def test_non_utf8_output_is_replaced_not_raised(env):
    start(env)
    obs, _, _, _, info = env.step(BASH(r"printf 'ok \xff\xfe\n'; printf '\xc3(' >&2"))
    assert obs.startswith("ok \ufffd\ufffd") and "\ufffd(" in obs and info["next_state"].evaluative.score == 0.5


def test_unknown_commands_get_the_error_quoted_in_the_directive(env):
    start(env)
    _, _, _, _, info = env.step(fenced_text("frobnicate --all"))
    ns = info["next_state"]
    assert ns.evaluative.tags == ("returncode=127",)
    assert ns.directive.startswith("`frobnicate: command not found` — the command does not exist here")


def test_writing_outside_the_work_dir_fails_and_the_host_is_untouched(env, tmp_path):
    host_file = tmp_path / "host.txt"
    host_file.write_text("mine\n")
    etc_before = Path("/etc/hostname").read_bytes() if Path("/etc/hostname").exists() else None
    start(env)
    for command in ("echo pwned > /etc/hostname", "touch /usr/claw-was-here", "echo x > ../outside.txt"):
        obs, _, _, _, info = env.step(BASH(command))
        ns = info["next_state"]
        assert ns.evaluative.score == -1.0 and "Read-only file system" in obs, obs
        assert "only the working directory and /tmp can be written" in ns.directive
    obs, _, _, _, _ = env.step(BASH(f"echo pwned > {host_file}"))
    assert "returncode=1" in obs
    assert host_file.read_text() == "mine\n" and not Path("/usr/claw-was-here").exists()
    if etc_before is not None:
        assert Path("/etc/hostname").read_bytes() == etc_before


def test_rm_rf_root_leaves_the_host_alone(env, tmp_path):
    sentinel = tmp_path / "keep.txt"
    sentinel.write_text("still here\n")
    package = Path(claw_envs.__file__).resolve().parent  # bound read-only inside the sandbox
    start(env)
    obs, _, _, _, info = env.step(BASH("rm -rf /"))
    assert "preserve-root" in obs and info["next_state"].evaluative.score == -1.0
    env.step(BASH(f"rm -rf --no-preserve-root {package} {tmp_path} /usr/bin/env; rm -rf --no-preserve-root /"))
    assert sentinel.read_text() == "still here\n" and (package / "core.py").exists()
    assert Path("/usr/bin/env").exists() and Path("/etc/passwd").exists()
    assert env.step(BASH("echo 'hello, world' > greeting.txt"))[0] == "returncode=0"  # the work dir still works


def test_a_dead_sandbox_is_an_infrastructure_failure(env):
    start(env)
    env.step(BASH("ls"))
    env.sandbox.current.close()  # the sandbox dies under the env
    _, _, terminated, truncated, info = env.step(BASH("ls"))
    assert info["status"] == "sandbox_failure" and truncated and not terminated
    assert info["next_state"].outcome is None


def test_the_turn_limit_runs_the_check(tmp_path):
    env = TerminalEnv(split="train", max_turns=2)
    try:
        start(env)
        env.step(BASH("ls"))
        _, reward, terminated, truncated, info = env.step(BASH("echo 'hello, world' > greeting.txt"))
        ns = info["next_state"]
        assert (truncated, terminated, reward, ns.outcome, ns.role) == (True, False, 1.0, 1.0, "tool")
        assert "tests=1/1" in ns.evaluative.tags and info["check"].endswith("check passed")
        start(env)
        env.step(BASH("ls"))
        _, reward, _, truncated, info = env.step("")
        assert (truncated, reward, info["next_state"].outcome) == (True, 0.0, 0.0)
    finally:
        env.close()


def test_jsonl_tasks_load_and_a_missing_field_names_the_row(tmp_path):
    rows = [
        {
            "id": "hi",
            "instruction": "Write hi into a.txt.",
            "check": "grep -qx hi a.txt",
            "solution": ["echo hi > a.txt"],
        },
        {
            "instruction": "Make run.sh executable.",
            "files": {"run.sh": "echo run\n"},
            "setup": "chmod 644 run.sh",
            "check": "test -x run.sh",
        },
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = TerminalEnv(tasks=str(path), split="test")
    try:
        assert [t.id for t in env.tasks] == ["hi", "mine-1"]
        env.reset(options={"task_id": "mine-1"})
        assert env.step(BASH("ls -l run.sh | cut -c1-10"))[0] == "-rw-r--r--\nreturncode=0"
        env.step(BASH("chmod +x run.sh"))
        assert env.step("done")[1] == 1.0
    finally:
        env.close()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"instruction": "no check here"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl: task 'bad-1' \(row 2\): missing the required field 'check'"):
        load_tasks(bad)
    with pytest.raises(ValueError, match="'files' must be a JSON object"):
        bad.write_text(json.dumps({**rows[1], "files": ["run.sh"]}) + "\n")
        load_tasks(bad)


def test_seeding_picks_tasks_reproducibly_per_env():
    a, b = TerminalEnv(), TerminalEnv()
    try:
        first = [a.reset(seed=s)[1]["task_id"] for s in range(6)]
        assert first == [b.reset(seed=s)[1]["task_id"] for s in range(6)]
        assert len(set(first)) > 1
        assert {a.reset()[1]["task_id"] for _ in range(20)} <= {t.id for t in builtin_tasks("train")}
    finally:
        a.close()
        b.close()


def test_splits_are_disjoint_and_fixed_by_hash():
    train, test = {t.id for t in builtin_tasks("train")}, {t.id for t in builtin_tasks("test")}
    folders = builtin_folders()
    assert train.isdisjoint(test) and train | test == set(BUILTIN) | set(folders) and len(test) >= 3
    assert len(train | test) >= 40 and len(folders) >= 10 and {d["format"] for d in folders.values()} == {"harbor"}
    with pytest.raises(ValueError, match="splits"):
        builtin_tasks("dev")


def test_reference_actions_and_demonstrations_speak_the_action_format(env):
    start(env, "count-lines")
    assert env.reference_action() == BASH("wc -l notes.txt")
    env.step(env.reference_action())
    assert env.reference_action() == BASH("wc -l < notes.txt > count.txt")
    env.step(env.reference_action())
    assert read_turn(env.reference_action()).kind == "final"
    demos = env.demonstrations(40, seed=3)
    assert len(demos) == 40 and demos == env.demonstrations(40, seed=3)
    kinds = {read_turn(d["completion"]).kind for d in demos}
    assert kinds == {"command", "final"}
    assert any(d["completion"].startswith("```bash") for d in demos) and any(
        "<tool_call>" in d["completion"] for d in demos
    )
    for d in demos:
        assert d["messages"][0]["role"] == "system" and d["messages"][1]["role"] == "user"
        assert all("returncode=0" in m["content"] for m in d["messages"][2:] if m["role"] in ("tool", "user"))


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_claw_train_then_claw_eval_on_a_folder_of_task_folders(tmp_path):
    pytest.importorskip("trl")
    from claw_train.runlog.logs import Ledger

    tasks = str(Path(__file__).parent / "fixtures" / "terminal" / "good")
    model = str(bootstrap_tiny())
    out = tmp_path / "run"
    config = tmp_path / "cfg.yaml"
    config.write_text("max_new_tokens: 16\nmax_turns: 2\nreport_to: none\nsamples_per_step: 4\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    bin_dir = Path(sys.executable).parent
    # tiny runs no command in 16 tokens here: the idle stop is off, this test is about the plumbing
    proc = subprocess.run(
        [str(bin_dir / "claw-train"), "--env", "terminal", "--tasks", tasks, "--model", model, "--updates", "2",
         "--output-dir", str(out), "--config", str(config), "--no-display", "--max-idle-episodes", "0"],
        capture_output=True, text=True, timeout=170, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entries = Ledger(out / "ledger.jsonl").effective()
    assert [e["update"] for e in entries] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 2
    assert json.loads((out / "run.json").read_text())["env"] == "claw/Terminal-v0"
    from claw_train.runlog.logs import read_logs

    seen = {r["task"] for r in read_logs(out / "logs") if r["kind"] == "turn"}
    assert seen and seen <= {"harbor-basic", "harbor-reward", "tb1-basic"}  # rollouts drew from the folders only

    evaluation = tmp_path / "eval"
    proc = subprocess.run(
        [str(bin_dir / "claw-eval"), "--env", "terminal", "--tasks", tasks, "--model", str(out), "--eval-n", "3",
         "--max-turns", "1", "--max-new-tokens", "16", "--rollout-workers", "1", "--output-dir", str(evaluation)],
        capture_output=True, text=True, timeout=90, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((evaluation / "summary.json").read_text())
    assert result["tasks"] == 3 and result["samples"] == 3 and result["infra_failures"] == 0


def bootstrap_tiny() -> Path:
    from claw_train.models.tiny import bootstrap

    return bootstrap("terminal", steps=2, progress=False)
