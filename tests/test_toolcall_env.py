"""claw/ToolCall-v0 end to end on the real local sandbox: scripted agents, signals, every bad input."""

from __future__ import annotations

import json
import re
import socket

import gymnasium as gym
import pytest

import claw_envs
from claw_envs.toolcall import ToolCallEnv
from claw_envs.toolcall.env import NUDGE, tool_call_text
from claw_envs.toolcall.tasks import builtin_tasks, make_arithmetic


def py(code: str) -> str:
    return tool_call_text(code)


@pytest.fixture
def env():
    # 5 s, not 1: under `make test`'s full load a sandboxed `print(2 + 2)` has taken over a second (CI, 2026-12-06)
    e = ToolCallEnv(split="test", tool_timeout=5.0)
    yield e
    e.close()


def solve_from_question(question: str) -> str:
    """A scripted policy that reads the problem text (never the task's data) and writes the program."""
    if m := re.fullmatch(r"What is (\d+) × (\d+)\?", question):
        return f"print({m[1]} * {m[2]})"
    if m := re.fullmatch(r"What is the sum ([\d + ]+)\?", question):
        return f"print({m[1]})"
    if m := re.fullmatch(r"What is the remainder when (\d+)\^(\d+) is divided by (\d+)\?", question):
        return f"print(pow({m[1]}, {m[2]}, {m[3]}))"
    if m := re.match(r"What is the sum of the decimal digits of (\d+)!", question):
        return f"import math\nprint(sum(map(int, str(math.factorial({m[1]})))))"
    raise AssertionError(f"unexpected question {question!r}")


def test_registered_and_made_through_gymnasium():
    assert claw_envs.resolve_id("toolcall") == "claw/ToolCall-v0"
    env = gym.make("claw/ToolCall-v0", split="test", max_turns=4)
    obs, info = env.reset(seed=5)
    assert info["task_id"].startswith("arith-") and obs == info["messages"][-1]["content"]
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert '"name": "python"' in info["messages"][0]["content"] and info["tools"][0]["function"]["name"] == "python"
    env.close()


def test_the_system_prompt_states_the_per_turn_limits():
    env = ToolCallEnv(split="test", tool_timeout=3.0, max_calls_per_turn=4)
    _, info = env.reset(seed=0)
    system = info["messages"][0]["content"]
    assert "3-second limit" in system and "up to 4 calls in a turn (6 seconds in all)" in system
    assert env.turn_time_budget == 6.0 and env.parse_limits.max_calls == 4
    env.close()


def test_a_scripted_policy_that_calls_the_tool_solves_the_built_in_set(env):
    for task in list(builtin_tasks("test"))[:4]:  # one of each kind
        obs, info = env.reset(options={"task_id": task.id})
        obs, reward, terminated, truncated, info = env.step(f"Let me compute this.\n{py(solve_from_question(obs))}")
        ns = info["next_state"]
        assert (ns.role, ns.evaluative.score, reward, terminated) == ("tool", 1.0, 0.0, False)
        assert ns.directive is None and ns.outcome is None
        printed = obs.strip()
        assistant, tool = info["messages"][-2:]
        assert assistant["content"] == "Let me compute this."
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["code"] == solve_from_question(
            info["messages"][1]["content"]
        )
        assert tool == {"role": "tool", "tool_call_id": "call_1_0", "name": "python", "content": printed}
        obs, reward, terminated, truncated, info = env.step(f"The program printed it: \\boxed{{{printed}}}")
        ns = info["next_state"]
        assert (ns.outcome, reward, terminated, truncated, ns.evaluative.score) == (1.0, 1.0, True, False, 1.0)
        assert printed == task.data["answer"]


def test_reference_action_calls_the_tool_then_boxes_the_answer(env):
    env.reset(options={"task_id": "arith-1000001"})
    first = env.reference_action()
    assert first.startswith("<tool_call>")
    _, _, _, _, info = env.step(first)
    assert info["next_state"].evaluative.score == 1.0
    second = env.reference_action()
    assert "\\boxed{" in second and "<tool_call>" not in second
    _, reward, terminated, _, info = env.step(second)
    assert (
        terminated
        and reward == 1.0
        and info["next_state"].judge_inputs.keys()
        == {
            "task",
            "history",
            "action",
            "result",
        }
    )
    assert f"tool: {env.task.data['answer']}" in info["next_state"].judge_inputs["history"]


def test_a_policy_that_sends_bad_json_gets_the_error_signals_until_the_limit():
    env = ToolCallEnv(split="test", max_turns=3)
    env.reset(seed=0)
    for _step in range(1, 4):
        _obs, reward, terminated, truncated, info = env.step(
            '<tool_call>{"name": "python", "arguments": {code: 1}}</tool_call>'
        )
        ns = info["next_state"]
        assert ns.evaluative.score == -1.0 and "tool_error=bad_json" in ns.evaluative.tags
        assert "not valid JSON" in ns.text and "not valid JSON" in ns.directive
        assert ns.role == "environment" and info["messages"][-1]["role"] == "user"
        assert info["status"] == "ok" and not terminated
    assert truncated and ns.outcome == -1.0 and reward == -1.0
    env.close()


def test_several_calls_in_one_turn_are_answered_in_order(env):
    env.reset(seed=1)
    action = py("print(6 * 7)") + "\n" + '<tool_call>{"name": "calc", "arguments": {}}</tool_call>' + py("print(1)")
    obs, _, _, _, info = env.step(action)
    ns = info["next_state"]
    assert (
        ns.evaluative.score == -1.0
        and "tool_error=unknown_tool" in ns.evaluative.tags
        and "calls=3" in ns.evaluative.tags
    )
    assert obs.index("[call 1: python]\n42") < obs.index("[call 2: calc]") < obs.index("[call 3: python]\n1")
    tools = [m for m in info["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_1_0", "call_1_1", "call_1_2"]
    assert "no tool named 'calc'" in tools[1]["content"]
    assert [c["id"] for c in info["messages"][-4]["tool_calls"]] == ["call_1_0", "call_1_1", "call_1_2"]


def test_openai_format_actions_keep_their_ids(env):
    env.reset(seed=2)
    msg = {
        "content": "",
        "tool_calls": [
            {"id": "abc", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(5)"}'}}
        ],
    }
    obs, _, _, _, info = env.step(json.dumps(msg))
    assert obs == "5" and info["messages"][-1]["tool_call_id"] == "abc"
    assert info["messages"][-2]["tool_calls"][0]["id"] == "abc"


def test_a_turn_with_no_call_and_no_box_is_told_what_to_do(env):
    env.reset(seed=3)
    obs, _reward, terminated, _truncated, info = env.step("Hmm, let me think about it.")
    ns = info["next_state"]
    assert obs == NUDGE and ns.evaluative.score == -1.0 and "no_action" in ns.evaluative.tags
    assert "\\boxed" in ns.directive and "<tool_call>" in ns.directive
    assert info["messages"][-1] == {"role": "user", "content": NUDGE} and not terminated


def test_wrong_answer_and_tool_use_bonus():
    env = ToolCallEnv(split="test", tool_use_bonus=0.5)
    env.reset(options={"task_id": "arith-1000000"})
    _, reward, terminated, _, info = env.step("\\boxed{12}")
    ns = info["next_state"]
    assert (reward, terminated, ns.outcome, ns.evaluative.score) == (-1.0, True, -1.0, 0.0)
    assert "answer=wrong" in ns.evaluative.tags and ns.directive
    env.reset(options={"task_id": "arith-1000000"})
    _, reward, _, _, _ = env.step(f"\\boxed{{{env.task.data['answer']}}}")
    assert reward == 1.0  # no tool call ran: no bonus
    env.reset(options={"task_id": "arith-1000000"})
    env.step(env.reference_action())
    _, reward, _, _, _ = env.step(env.reference_action())
    assert reward == 1.5
    env.close()


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    yield server
    server.close()


BAD_INPUTS = {
    "malformed_json": (
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"</tool_call>',
        -1.0,
        "not valid JSON",
    ),
    "unknown_tool": (
        '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>',
        -1.0,
        "no tool named 'shell'",
    ),
    "wrong_argument_type": (
        '<tool_call>{"name": "python", "arguments": {"code": ["print(1)"]}}</tool_call>',
        -1.0,
        "must be string",
    ),
    "loops_forever": (py("import time\nwhile True:\n    time.sleep(1)"), -1.0, "5-second limit"),
    "prints_megabytes": (py("print('x' * 5_000_000)"), 0.0, "output was too long"),
    "unclosed_tag": ('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}', -1.0, "never closed"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_inputs_are_clear_tool_errors_and_the_env_survives(env, name):
    action, score, needle = BAD_INPUTS[name]
    env.reset(seed=4)
    obs, reward, terminated, truncated, info = env.step(action)
    ns = info["next_state"]
    assert info["status"] == "ok" and not terminated and not truncated and reward == 0.0
    assert ns.evaluative.score == score and needle in ns.text and ns.directive
    if name == "prints_megabytes":
        assert len(ns.text) < 3000
    obs, _, _, _, info = env.step(py("print(2 + 2)"))
    assert obs == "4" and info["next_state"].evaluative.score == 1.0


def test_deleting_host_files_fails_and_they_survive(tmp_path):
    tmp_path.chmod(0o755)  # shared folders keep their host permissions; the sandbox user is not the owner
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    env = ToolCallEnv(split="test", sandbox_options={"binds_ro": [str(tmp_path)]})
    env.reset(seed=0)
    code = f"import os, shutil\nprint(open({str(victim)!r}).read())\nos.remove({str(victim)!r})"
    obs, _, _, _, info = env.step(py(code))
    ns = info["next_state"]
    assert obs.startswith("precious") and "Read-only file system" in obs  # visible, but not deletable
    assert ns.evaluative.score == -1.0 and "exception=OSError" in ns.evaluative.tags and "OSError" in ns.directive
    obs, _, _, _, info = env.step(py(f"import shutil\nshutil.rmtree({str(tmp_path)!r})"))
    assert info["next_state"].evaluative.score == -1.0
    assert victim.read_text() == "precious"
    env.close()


def test_opening_a_socket_to_the_host_fails(env, listener):
    port = listener.getsockname()[1]
    env.reset(seed=0)
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\nprint('sent')"
    obs, _, _, _, info = env.step(py(code))
    ns = info["next_state"]
    assert ns.evaluative.score == -1.0 and "sent" not in obs
    assert re.search(r"ConnectionRefusedError|Network is unreachable|timed out", obs)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached the host
    assert info["status"] == "ok"


def test_a_dead_sandbox_is_an_infrastructure_failure_not_the_agents(env):
    env.reset(seed=0)
    env.step(py("print(1)"))
    env.sandbox.current.close()  # the sandbox dies under the env
    _, _, terminated, truncated, info = env.step(py("print(1)"))
    assert info["status"] == "sandbox_failure" and truncated and not terminated
    assert "sandbox" in info["next_state"].text
    env.reset(seed=0)  # a new episode gets a new sandbox
    obs, _, _, _, info = env.step(py("print(3)"))
    assert obs == "3" and info["status"] == "ok"


def test_demonstrations_are_tool_calls_and_boxed_answers(env):
    demos = env.demonstrations(4, seed=1)
    assert len(demos) == 4 and all(set(d) == {"messages", "completion"} for d in demos)
    call = json.loads(demos[0]["completion"].removeprefix("<tool_call>").removesuffix("</tool_call>"))
    assert call["name"] == "python"
    final = demos[1]
    tool_msg = final["messages"][-1]
    assert tool_msg["role"] == "tool" and f"\\boxed{{{tool_msg['content']}}}" in final["completion"]
    assert demos == env.demonstrations(4, seed=1) and demos != env.demonstrations(4, seed=2)


def test_built_in_splits_are_disjoint_and_need_the_tool():
    train, test = builtin_tasks("train"), builtin_tasks("test")
    assert set(train.seeds).isdisjoint(test.seeds)
    kinds = {make_arithmetic(s)["kind"] for s in range(8)}
    assert kinds == {"product", "sum", "modpow", "digitsum"}
    assert all(len(make_arithmetic(s)["answer"]) >= 3 for s in range(40))


def test_without_tools_the_same_problem_is_answered_in_writing_and_a_call_is_refused():
    env = ToolCallEnv(split="test", tools=False)
    _, info = env.reset(seed=3)
    system = info["messages"][0]["content"]
    assert "without tools" in system and "tool_call" not in system and info["tools"] == []
    _, _, done, _, step = env.step(py("print(1)"))
    ns = step["next_state"]
    assert not done and ns.evaluative.score == -1 and "tool_error=no_tools" in ns.evaluative.tags
    assert ns.action_taken is False and "no tools" in ns.text
    _, _, done, _, step = env.step("I think about it some more.")
    assert not done and "no final answer" in step["next_state"].text and "tool_call" not in step["next_state"].text
    answer = env.task.data["answer"]
    _, reward, done, _, step = env.step(f"Adding it up: \\boxed{{{answer}}}")
    assert done and reward == 1.0 and step["next_state"].outcome == 1.0
    env.close()
