"""A run whose policy never carries out an action stops after a few episodes and says why."""

from __future__ import annotations

import pytest

from claw_envs.terminal.env import TerminalEnv
from claw_envs.toolcall.env import ToolCallEnv
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.failures import FailureMonitor
from claw_train.runlog.metrics import Stats


def monitor(limit: int) -> tuple[FailureMonitor, RunControl, Stats]:
    stats = Stats()
    control = RunControl(stats)
    return FailureMonitor(control, stats, limit), control, stats


def test_idle_episodes_before_any_action_stop_the_run_with_a_reason():
    failures, control, stats = monitor(3)
    for _ in range(2):
        failures.episode_played(False)
    assert control.stop_reason is None
    failures.episode_played(None)  # not known: not counted
    failures.episode_played(False)
    assert control.stop_reason is not None and control.stop_reason[0] == "no_action"
    assert "first 3 episodes" in control.stop_reason[1] and "stopping" in stats.status
    assert stats.totals()["episodes_idle"] == 3


@pytest.mark.parametrize("limit", [0, 3])
def test_once_an_episode_acted_or_with_limit_zero_idle_episodes_never_stop_it(limit):
    failures, control, _ = monitor(limit)
    if limit:
        failures.episode_played(True)
    for _ in range(20):
        failures.episode_played(False)
    assert control.stop_reason is None


def test_toolcall_steps_say_whether_an_action_was_carried_out():
    env = ToolCallEnv()
    try:
        env.reset(seed=0)
        for junk in ("\x00\x01 noise", '<tool_call>{"name": "python", "arguments": {"code": 1</tool_call>'):
            assert env.step(junk)[4]["next_state"].action_taken is False
        assert env.step("the answer is \\boxed{3}")[4]["next_state"].action_taken is True
    finally:
        env.close()


def test_terminal_noise_and_a_done_message_run_no_command():
    env = TerminalEnv()
    try:
        env.reset(seed=0)
        assert env.step("")[4]["next_state"].action_taken is False
        assert env.step("```bash\necho hi\n```")[4]["next_state"].action_taken is True
        assert env.step("all done")[4]["next_state"].action_taken is False
    finally:
        env.close()


def test_toolcall_reads_a_fenced_python_block_and_a_final_answer_line_saying_which_it_graded():
    env = ToolCallEnv()
    try:
        env.reset(seed=0)
        ns = env.step("Let me compute.\n```python\nprint(6 * 7)\n```")[4]["next_state"]
        assert ns.role == "tool" and ns.text.strip() == "42" and ns.evaluative.score == 1.0 and ns.action_taken
        ns = env.step("```python\n```")[4]["next_state"]  # an empty block is no call: the nudge
        assert ns.evaluative.score == -1.0 and "no_action" in ns.evaluative.tags and not ns.action_taken
        gold = env.task.data["answer"]
        _, reward, term, _, info = env.step(f"So the product is that.\nFinal answer: {gold}")
        assert term and reward == 1.0 and "answer_form=final_answer_line" in info["next_state"].evaluative.tags
        env.reset(seed=0)
        tags = env.step(f"\\boxed{{{gold}}}")[4]["next_state"].evaluative.tags
        assert "answer_form=boxed" in tags
    finally:
        env.close()
