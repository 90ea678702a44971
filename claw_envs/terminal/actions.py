"""Read one terminal turn out of the model's raw text: a command, a final message, or a problem.

A command is a call of the ``bash`` tool (Hermes ``<tool_call>`` or OpenAI ``tool_calls``, read by
:mod:`claw_envs.toolcall.parse`) or a fenced block tagged ``bash``, ``sh`` or ``shell``. A turn must hold
exactly one. A turn with no command and some words is the final message ("done"); a turn with no words
at all (empty, whitespace, punctuation) is a problem, so junk never ends an episode.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.toolcall.parse import ToolCall, parse_action

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run one bash command line in the task's working directory and return its stdout, stderr and exit "
            "status. Files persist between calls; each call starts a new shell, with no network and a time limit."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command line to run."}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}
SCHEMAS = {"bash": BASH_TOOL["function"]["parameters"]}

_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell)[ \t]*\n(.*?)```", re.S | re.I)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell)[ \t]*\n", re.I)


@dataclass(frozen=True)
class Turn:
    """What the agent did. ``kind``: ``command`` (run ``command``), ``final`` or ``problem`` (see ``problem``).

    ``call`` is the tool call when the command came as one (its id answers the tool message) and ``prose`` the
    text around that call.
    """

    kind: Literal["command", "final", "problem"]
    command: str = ""
    call: ToolCall | None = None
    prose: str = ""
    problem: str = ""
    tag: str = ""


def read_turn(action: str, *, id_prefix: str = "call_") -> Turn:
    """Classify ``action`` (see the module docstring); never raises."""
    parsed = parse_action(action, SCHEMAS, id_prefix=id_prefix)
    fences = list(_FENCE.finditer(parsed.text))
    opened = len(_OPEN_FENCE.findall(parsed.text))
    count = len(parsed.items) + max(opened, len(fences))
    if count > 1:
        return Turn(
            "problem",
            problem=f"the turn holds {count} commands; send exactly one command per turn and read its output first",
            tag="several_commands",
        )
    if parsed.items:
        item = parsed.items[0]
        if not isinstance(item, ToolCall):
            return Turn("problem", problem=f"the bash tool call could not be run: {item.message}", tag=item.kind)
        return _command(item.arguments["command"], call=item, prose=parsed.text)
    if opened > len(fences):
        return Turn("problem", problem="the ```bash block is never closed: end it with ```", tag="unclosed_block")
    if fences:
        return _command(fences[0].group(1))
    if not re.search(r"\w", parsed.text):
        return Turn(
            "problem",
            problem="the turn is empty: run a command, or say in words that the task is done",
            tag="empty_action",
        )
    return Turn("final")


def _command(command: str, *, call: ToolCall | None = None, prose: str = "") -> Turn:
    command = command.strip()
    if not command:
        return Turn("problem", problem="the command is empty: put a shell command in it", tag="empty_command")
    return Turn("command", command=command, call=call, prose=prose)


def tool_call_text(command: str) -> str:
    """A Hermes-format call of the bash tool."""
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


def fenced_text(command: str) -> str:
    """A fenced bash block."""
    return f"```bash\n{command}\n```"
