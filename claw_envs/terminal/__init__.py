"""``claw/Terminal-v0``: jobs in a sandboxed Linux shell, checked by a shell command or a task folder's hidden tests.

``tasks`` holds the built-in tasks and the loader (JSONL files and task folders), ``folders`` reads Terminal-Bench
and Harbor task folders, ``grading`` sets them up and runs their tests, ``actions`` reads a turn (a ``bash`` tool
call, a fenced ```bash block, or a final message), ``signals`` scores a command's result, and ``env`` is the
environment.
"""

from claw_envs.spec import FamilySpec, JudgeTemplates, TrainingDefaults
from claw_envs.terminal.env import TerminalEnv

SPEC = FamilySpec(
    name="terminal",
    env_id="claw/Terminal-v0",
    entry_point="claw_envs.terminal.env:TerminalEnv",
    judge=JudgeTemplates(prm="prm_terminal", hint="hint_agent"),
    training=TrainingDefaults(max_new_tokens=128, max_turns=4, group_size=4),
    load_tasks="claw_envs.terminal.tasks:load_tasks",
    description="shell jobs in a persistent sandboxed shell, checked by a command or a task folder's tests",
)

__all__ = ["SPEC", "TerminalEnv"]
