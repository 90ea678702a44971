"""``claw/Terminal-v0``: small jobs in a sandboxed Linux shell, checked by a shell command at the end.

``tasks`` holds the built-in tasks and the JSONL loader, ``actions`` reads a turn (a ``bash`` tool call,
a fenced ```bash block, or a final message), ``signals`` scores a command's result, and ``env`` is the
environment.
"""

from claw_envs.terminal.env import TerminalEnv

__all__ = ["TerminalEnv"]
