"""The environment contract, shown on the reference EchoEnv and a failing toy env."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import claw_envs
from claw_envs import ClawEnv, Evaluative, InfraFailure, NextState, Opening, StepStatus, Task, TaskList, Transition
from claw_envs.core import UnicodeText, coerce_action


@pytest.mark.parametrize("env_id", claw_envs.env_ids())
def test_check_env_passes_for_every_registered_env(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_registered_ids_resolve_short_names():
    assert "claw/Echo-v0" in claw_envs.env_ids()
    assert claw_envs.resolve_id("echo") == "claw/Echo-v0"
    assert claw_envs.resolve_id("Echo-v0") == "claw/Echo-v0"
    with pytest.raises(KeyError, match="registered"):
        claw_envs.resolve_id("nope")


def test_echo_success_sets_every_next_state_field():
    env = gym.make("claw/Echo-v0")
    obs, info = env.reset(seed=3)
    assert obs.startswith("Repeat exactly")
    assert info["messages"] == [{"role": "user", "content": obs}]
    assert info["step_index"] == 0
    phrase = env.unwrapped.task.data["phrase"]
    obs, reward, terminated, truncated, info = env.step(f"  {phrase}\n")
    ns = info["next_state"]
    assert isinstance(ns, NextState)
    assert (ns.text, ns.role, ns.step_index) == ("Correct.", "environment", 1)
    assert ns.evaluative == Evaluative(1.0, ("match",))
    assert ns.directive is None
    assert ns.outcome == 1.0
    assert ns.image is None
    assert ns.judge_inputs["action"].strip() == phrase and ns.judge_inputs["result"] == "Correct."
    assert "task" in ns.judge_inputs
    assert (reward, terminated, truncated, info["status"]) == (1.0, True, False, "ok")
    assert [m["role"] for m in info["messages"]] == ["user", "assistant", "user"]
    env.close()


def test_echo_miss_gives_directive_and_truncation_gives_outcome():
    env = gym.make("claw/Echo-v0").unwrapped
    env.reset(seed=0)
    target = env.task.data["phrase"]
    for step in range(1, 4):
        _, reward, terminated, truncated, info = env.step("something else")
        ns = info["next_state"]
        assert ns.evaluative.score == -1.0 and ns.step_index == step
        assert target in ns.directive
        assert reward == 0.0 and not terminated
    assert truncated and ns.outcome == -1.0
    with pytest.raises(gym.error.ResetNeeded):
        env.step("again")


def test_task_choice_by_id_and_split():
    env = claw_envs.env_class("claw/Echo-v0")(split="test")
    _, info = env.reset(options={"task_id": "echo-test-2"})
    assert info["task_id"] == "echo-test-2" and env.task.split == "test"
    with pytest.raises(KeyError, match="echo-train-0"):
        env.reset(options={"task_id": "echo-train-0"})


def test_seeding_is_per_env_and_reproducible():
    a, b = gym.make("claw/Echo-v0"), gym.make("claw/Echo-v0")
    np.random.seed(0)
    ids_a = [a.reset(seed=s)[1]["task_id"] for s in range(6)]
    np.random.seed(123)
    ids_b = [b.reset(seed=s)[1]["task_id"] for s in range(6)]
    assert ids_a == ids_b
    assert len(set(ids_a)) > 1


@pytest.mark.parametrize("junk", [b"\xff\xfe bytes", None, 12345, "", "中文 😀", "x" * 100_000])
def test_bad_actions_are_next_states_not_exceptions(junk):
    env = gym.make("claw/Echo-v0").unwrapped
    env.reset(seed=1)
    _, _, _, _, info = env.step(junk)
    assert info["next_state"].evaluative.score == -1.0
    assert isinstance(info["messages"][-2]["content"], str)


def test_coerce_action():
    assert coerce_action(b"\xffa") == "\ufffda"
    assert coerce_action(None) == ""
    assert coerce_action(3) == "3"


def test_unicode_text_space_accepts_any_text():
    space = UnicodeText(max_length=10, seed=0)
    assert space.contains("a b, c! é")
    assert not space.contains("x" * 11)
    assert not space.contains(3)
    assert all(space.contains(space.sample()) for _ in range(20))


class _Flaky(ClawEnv):
    family = "flaky"

    @classmethod
    def default_tasks(cls, split="train"):
        return TaskList([Task("t0", split, {})], split)

    async def _begin(self, task):
        return Opening("go", [{"role": "user", "content": "go"}])

    async def _act(self, action):
        if action == "crash":
            raise InfraFailure("sandbox died", StepStatus.SANDBOX_FAILURE)
        return Transition("ok", NextState("fine", role="tool", evaluative=Evaluative(0.5, ("x",))))


def test_infra_failure_is_typed_status_not_exception():
    env = _Flaky()
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step("fine")
    assert info["status"] == "ok" and info["messages"][-1] == {"role": "tool", "content": "fine"}
    _, _, terminated, truncated, info = env.step("crash")
    assert info["status"] == "sandbox_failure"
    assert truncated and not terminated
    assert "sandbox died" in info["next_state"].text


def test_async_api_runs_many_envs_in_one_loop():
    async def episode(seed):
        env = gym.make("claw/Echo-v0").unwrapped
        await env.areset(seed=seed)
        out = await env.astep(env.reference_action())
        await env.aclose()
        return out[2]

    async def main():
        return await asyncio.gather(*(episode(s) for s in range(20)))

    assert all(asyncio.run(main()))


def test_sync_api_inside_running_loop_says_use_async():
    env = gym.make("claw/Echo-v0").unwrapped

    async def main():
        env.reset(seed=0)

    with pytest.raises(RuntimeError, match="areset"):
        asyncio.run(main())


def test_evaluative_range_is_checked():
    with pytest.raises(ValueError):
        Evaluative(2.0)


def test_next_state_to_dict_is_json_friendly():
    import json

    ns = NextState("t", image=b"\x89PNG....", judge_inputs={"a": 1})
    assert json.loads(json.dumps(ns.to_dict()))["image"] == "<png 8 bytes>"


@pytest.mark.parametrize("env_id", claw_envs.env_ids())
@pytest.mark.parametrize("junk", ["hmm, not sure", "", "<tool_call>{not json</tool_call>", "\x00\ud800 ??"])
def test_junk_actions_are_minus_one_with_a_directive_in_every_family(env_id, junk):
    """The contract: bad agent output is -1 with a directive that says what was wrong, in every family."""
    env = gym.make(env_id).unwrapped
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(junk)
    finally:
        env.close()
    ns = info["next_state"]
    assert info["status"] == "ok", info
    assert ns.evaluative.score == -1.0 and ns.directive, (env_id, junk, ns)
