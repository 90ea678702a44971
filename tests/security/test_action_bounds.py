"""Issue 16, "Parsers": each finding reproduced, and each bound an agent error (-1 + a directive), never an
exception, an infrastructure failure or a long step.

Findings (measured on the code before the bounds): deeply nested JSON in a ``<tool_call>`` raised
``RecursionError`` out of ``step()`` in ToolCall and Terminal; a 5000-digit ``\\boxed{}`` raised ``ValueError``
in grading; one turn could hold 500 tool calls (a 32 s step) and 5 × ``sleep(9.5)`` made a 48 s step; a command
over 128 KiB could not be launched and was masked as ``sandbox_failure``.
"""

from __future__ import annotations

import json
import time

import pytest
from test_sandbox import needs_bwrap

from claw_envs.shell_turns import MAX_COMMAND_BYTES, fenced_text, read_turn
from claw_envs.shell_turns import tool_call_text as bash
from claw_envs.terminal import TerminalEnv
from claw_envs.tool_calls.parse import (
    MAX_ACTION_CHARS,
    MAX_JSON_DEPTH,
    ParseLimits,
    parse_action,
    strip_tool_calls,
)
from claw_envs.toolcall import ToolCallEnv
from claw_envs.toolcall.boxed import last_boxed
from claw_envs.toolcall.env import tool_call_text as py
from claw_envs.toolcall.signals import MAX_ANSWER_CHARS, exact_value, grade_answer, grade_response
from claw_envs.toolcall.tools import PYTHON


@pytest.fixture
def toolcall():
    env = ToolCallEnv(split="test", tool_timeout=1.0)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.fixture
def toolcall_at_defaults():
    env = ToolCallEnv(split="test")
    env.reset(seed=0)
    yield env
    env.close()


@pytest.fixture
def terminal():
    env = TerminalEnv(split="train", command_timeout=2.0)
    env.reset(options={"task_id": "greeting-file"})
    yield env
    env.close()


def refused(env, action: str, *needles: str, tag: str | None = None) -> dict:
    """Step ``action``: it must come back as the agent's error (-1, a directive naming ``needles``), with nothing run
    in a sandbox, and the episode going on."""
    _, reward, terminated, _, info = env.step(action)
    ns = info["next_state"]
    assert info["status"] == "ok", ns.text
    assert ns.evaluative.score == -1.0 and ns.directive, ns
    for needle in needles:
        assert needle in ns.directive, (needle, ns.directive)
    if tag is not None:
        assert any(tag in t for t in ns.evaluative.tags), ns.evaluative.tags
    assert not terminated and reward == 0.0
    assert env.sandbox.current is None, "something ran in the sandbox"
    return info


NESTED = [
    "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>",
    "<tool_call>" + '{"a":' * 5000 + "1" + "}" * 5000 + "</tool_call>",
    '<tool_call>{"name": "python", "arguments": {"code": ' + "[" * 100_000 + "]" * 100_000 + "}}</tool_call>",
    '<tool_call>{"name": "bash", "arguments": "' + "[" * 3000 + "]" * 3000 + '"}</tool_call>',
    json.dumps({"tool_calls": [{"id": "a", "function": {"name": "bash", "arguments": "[" * 3000 + "]" * 3000}}]}),
    '{"tool_calls": ' + "[" * 3000 + "]" * 3000 + "}",
    "<tool_call>" + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "</tool_call>",
]


@needs_bwrap
@pytest.mark.parametrize("action", NESTED, ids=range(len(NESTED)))
def test_deeply_nested_json_is_refused_in_toolcall_and_terminal(toolcall, terminal, action):
    refused(toolcall, action.replace('"bash"', '"python"'), str(MAX_JSON_DEPTH), tag="too_deep")
    refused(terminal, action.replace('"python"', '"bash"'), str(MAX_JSON_DEPTH), tag="too_deep")


@needs_bwrap
def test_nesting_within_the_limit_is_read_as_before(toolcall):
    deep_but_fine = "[" * (MAX_JSON_DEPTH - 3) + "]" * (MAX_JSON_DEPTH - 3)
    action = '<tool_call>{"name": "python", "arguments": {"code": ' + deep_but_fine + "}}</tool_call>"
    _, _, _, _, info = toolcall.step(action)
    assert "must be string, got array" in info["next_state"].directive  # read, then found to be the wrong type


def test_a_5000_digit_boxed_answer_is_graded_wrong_without_an_exception():
    huge = "1" * 5000
    assert exact_value(huge) is None  # Python's int-string conversion limit is 4300 digits
    grade = grade_response(f"so \\boxed{{{huge}}}", "42")
    assert not grade.correct and grade.method == "too_long"
    assert (
        grade_answer("9" * 999, "9" * 999).correct
        and grade_answer(f"{'9' * 990}/7", f"\\frac{{{'9' * 990}}}{{7}}").correct
    )
    # a reference answer past the exact-value limit is compared as spelt, without converting it
    assert grade_answer("1" * 5000, "1" * 5000).method == "too_long"
    assert not grade_answer("123", "1" * 5000).correct
    assert grade_answer("1" * 800, "1" * 800 + ".0").method in ("string", "math_verify", "timeout")


@needs_bwrap
@pytest.mark.parametrize("digits", [5000, 100_000])
def test_a_huge_boxed_number_in_the_env_is_refused_and_the_episode_goes_on(toolcall, digits):
    info = refused(
        toolcall, f"The answer is \\boxed{{{'7' * digits}}}.", f"{MAX_ANSWER_CHARS:,}", tag="answer_too_long"
    )
    assert info["next_state"].outcome is None


@needs_bwrap
def test_a_huge_number_inside_a_tool_call_is_bad_json_not_an_exception(toolcall, terminal):
    action = '<tool_call>{"name": "python", "arguments": {"code": ' + "9" * 5000 + "}}</tool_call>"
    refused(toolcall, action, "digits", tag="bad_json")
    refused(terminal, action.replace("python", "bash"), "digits", tag="bad_json")


@needs_bwrap
def test_500_tool_calls_in_one_turn_are_refused_at_once(toolcall, terminal):
    action = "\n".join([py("import time; time.sleep(9.5)")] * 500)
    refused(toolcall, action, "500 tool calls", "8", tag="too_many_calls")
    refused(terminal, "\n".join([bash("sleep 9.5")] * 500), "more than 8", tag="several_commands")
    openai = json.dumps([{"id": f"c{i}", "function": {"name": "python", "arguments": "{}"}} for i in range(500)])
    refused(toolcall, openai, "500 tool calls", tag="too_many_calls")
    strays = "</tool_call>" * 500  # broken calls count too: 500 error messages would be a next state of 40 KB
    refused(toolcall, strays, "500 tool calls", tag="too_many_calls")


@needs_bwrap
def test_the_calls_of_one_turn_share_a_time_budget():
    env = ToolCallEnv(split="test", tool_timeout=2.0)  # budget: 2 × 2 s
    assert env.turn_time_budget == 4.0 and env.max_calls_per_turn == 8
    env.reset(seed=0)
    _, _, _, _, info = env.step("\n".join([py("import time; time.sleep(0.9); print('ok')")] * 8))
    env.close()
    ns = info["next_state"]
    assert info["status"] == "ok" and ns.evaluative.score == -1.0 and "turn_time_budget" in ns.evaluative.tags
    assert "4 s in all" in ns.directive
    outputs = [m["content"] for m in info["messages"] if m["role"] == "tool"]
    finished = [out for out in outputs if out.strip() == "ok"]
    # at most 4 × 0.9 s fit the 4 s (without the shared budget all 8 would say ok): the rest are stopped or not run
    assert len(outputs) == 8 and len(finished) <= 4 and "was not run" in outputs[-1], outputs
    assert all("the calls of one turn share the 4-second" in out for out in outputs[len(finished) :]), outputs


@needs_bwrap
def test_the_per_turn_defaults_bound_a_turn_of_sleeps():
    """The issue's figure: 5 × sleep(9.5) was a 48 s step; with the default 10 s timeout it is now at most ~20 s.
    Measured with the same ratios at a tenth of the scale: 5 × sleep(0.95) with a 1 s timeout."""
    env = ToolCallEnv(split="test", tool_timeout=1.0, turn_time_budget=None)
    env.reset(seed=0)
    _, _, _, _, info = env.step("".join([py("import time; time.sleep(0.95)")] * 5))
    env.close()
    assert env.turn_time_budget == 2.0 and "turn_time_budget" in info["next_state"].evaluative.tags
    outputs = [m["content"] for m in info["messages"] if m["role"] == "tool"]
    stopped = [out for out in outputs if "the calls of one turn share the 2-second" in out]
    assert len(outputs) == 5 and len(stopped) >= 3, outputs  # at most 2 × 0.95 s of sleeping ran to the end


@needs_bwrap
def test_calls_within_the_limits_run_as_before(toolcall_at_defaults):
    """Eight quick calls at the default limits (the 1 s fixture gives 8 interpreter starts only 2 s, which a loaded
    host can spend on the starts alone)."""
    toolcall = toolcall_at_defaults
    _, _, _, _, info = toolcall.step("".join(py(f"print({i} * 2)") for i in range(8)))
    ns = info["next_state"]
    assert ns.evaluative.score == 1.0 and ns.directive is None and "calls=8" in ns.evaluative.tags
    assert [m["content"] for m in info["messages"] if m["role"] == "tool"] == [str(i * 2) for i in range(8)]


@needs_bwrap
def test_a_turn_over_the_size_limit_is_refused(toolcall, terminal):
    action = "x" * (MAX_ACTION_CHARS + 1)
    refused(toolcall, action, f"{MAX_ACTION_CHARS:,}", tag="too_large")
    refused(terminal, action, f"{MAX_ACTION_CHARS:,}", tag="too_large")


@needs_bwrap
def test_a_command_over_the_argv_limit_is_the_agents_error_not_a_sandbox_failure(terminal):
    long_command = "echo " + "a" * (200 * 1024)  # over the kernel's 128 KiB cap on one argument
    refused(terminal, fenced_text(long_command), f"{MAX_COMMAND_BYTES:,}", tag="command_too_long")
    refused(terminal, bash(long_command), f"{MAX_COMMAND_BYTES:,}", tag="command_too_long")
    _, _, _, _, info = terminal.step(bash("echo " + "b" * (MAX_COMMAND_BYTES - 100) + " | wc -c"))
    assert info["status"] == "ok" and info["next_state"].evaluative.score > 0  # just under the limit: it runs


@needs_bwrap
@pytest.mark.parametrize("bad", ["\x00", "\ud800", "\udfff"])
def test_characters_no_program_can_take_are_refused(toolcall, terminal, bad):
    refused(toolcall, py(f"print('{bad}')"), "write plain text", tag="bad_arguments")
    escaped = (
        '<tool_call>{"name": "python", "arguments": {"code": "print(\'\\' + f"u{ord(bad):04x}" + "')\"}}</tool_call>"
    )
    refused(toolcall, escaped, "write plain text", tag="bad_arguments")
    refused(terminal, fenced_text(f"echo {bad}"), "write plain text", tag="invalid_character")
    refused(terminal, bash(f"echo {bad}"), "write plain text")


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "\\boxed{" * n,  # every unclosed box used to be scanned to the end: quadratic
        lambda n: "\\boxed{" * n + "}" * 3,
        lambda n: "<tool_call>" * n + "</tool_call>",
        lambda n: "```bash\n" * n,
        lambda n: "{" * (10 * n),
        lambda n: '"' * (18 * n),
        lambda n: "<tool_call>" + "[]" * (2 * n) + "</tool_call>",
    ],
    ids=["unclosed-boxes", "nested-boxes", "open-tags", "open-fences", "braces", "quotes", "flat-json"],
)
def test_pathological_turns_are_read_in_linear_time(make):
    """Eight times the input costs about eight times the work (a quadratic reader: 64 times; allowed: 20), measured
    as each reader's CPU time (the best of two) at 6,250 and 50,000 units of each pathological shape. A ratio, not
    a time limit: a busy machine slows both sizes alike."""
    readers = (
        lambda action: parse_action(action, {"python": PYTHON.parameters}, limits=ParseLimits(max_calls=8)),
        lambda action: last_boxed(strip_tool_calls(action)),
        read_turn,
    )
    small, large = make(6_250), make(50_000)
    for i, read in enumerate(readers):
        t_small, t_large = _cpu_seconds(read, small), _cpu_seconds(read, large)
        assert t_large < 20 * t_small + 0.02, f"reader {i}: {t_small:.3f} s at 6,250 units, {t_large:.3f} s at 50,000"


def _cpu_seconds(read, action: str) -> float:
    """The CPU time of ``read(action)``, the best of two (the work done, whatever else the machine runs)."""
    times = []
    for _ in range(2):
        start = time.process_time()
        read(action)
        times.append(time.process_time() - start)
    return min(times)
