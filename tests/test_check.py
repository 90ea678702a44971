"""``claw-envs check``: the oracle must solve every task and doing nothing must not; broken tasks are named."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from typer.testing import CliRunner

import claw_envs
from claw_envs.check import check_env
from claw_train.commands import envs
from tests.test_sandbox import needs_bwrap


def invoke(*args: str):
    return CliRunner().invoke(envs.app, ["check", *args])


@needs_bwrap
def test_every_built_in_terminal_task_passes():
    result = invoke("terminal", "--jobs", "2")
    assert result.exit_code == 0, result.output
    assert "41 of 41 terminal tasks pass the check." in result.output


@needs_bwrap
def test_broken_tasks_are_named_with_why(tmp_path):
    rows = [
        {"id": "good", "instruction": "Create done.txt.", "check": "test -f done.txt", "solution": ["touch done.txt"]},
        {"id": "wrong-oracle", "instruction": "Create done.txt.", "check": "test -f done.txt", "solution": ["true"]},
        {"id": "always-solved", "instruction": "Do anything.", "check": "true", "solution": ["true"]},
        {"id": "bad-setup", "instruction": "x", "check": "true", "setup": "exit 3", "solution": ["true"]},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = invoke("terminal", "--tasks", str(path), "--split", "test")
    assert result.exit_code == 1, result.output
    assert "1 of 4 terminal tasks pass the check." in result.output
    failing = result.output.split("failing:")[1]
    assert {name.strip() for name in failing.split(",")} == {"wrong-oracle", "always-solved", "bad-setup"}
    assert "the oracle solution does not solve it" in result.output
    assert "doing nothing already solves it" in result.output
    assert "setup failed (exit 3)" in result.output


def test_a_family_without_a_null_action_is_checked_on_its_oracle_only():
    env = gym.make("claw/Echo-v0").unwrapped
    ids = [task.id for task in env.tasks][:3]
    results = env._run(check_env(env, ids))
    assert [r.task_id for r in results] == ids
    assert all(r.problem is None and r.null is None and r.oracle.outcome == 1.0 for r in results)
    env.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [(("nope",), "registered families"), (("terminal", "--split", "dev"), "train, test, all")],
)
def test_bad_arguments_are_clear(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert claw_envs.family_spec("terminal")  # the registry is untouched


def test_a_procedural_family_is_checked_on_a_sample_and_limit_says_how_many():
    result = invoke("conversation", "--split", "test", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert "test: checking the first 3 of" in result.output and "3 of 3 conversation tasks pass" in result.output
    default = invoke("conversation", "--split", "train")  # a million seeds: the first 50, not all of them
    assert default.exit_code == 0, default.output
    assert f"{envs.PROCEDURAL_CHECKS} of {envs.PROCEDURAL_CHECKS} conversation tasks pass" in default.output
