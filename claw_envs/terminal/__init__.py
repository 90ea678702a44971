"""``claw/Terminal-v0``: small jobs in a sandboxed Linux shell, checked by a shell command at the end.

``tasks`` holds the built-in tasks and the JSONL loader, ``actions`` reads a turn (a ``bash`` tool call,
a fenced ```bash block, or a final message), ``signals`` scores a command's result, and ``env`` is the
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
    description="shell jobs in a sandbox, checked by a command at the end",
)

__all__ = ["SPEC", "TerminalEnv"]
