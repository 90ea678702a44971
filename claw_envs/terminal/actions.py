"""Read one terminal turn out of the model's raw text: a command, a final message, or a problem.

A command is a call of the ``bash`` tool (Hermes ``<tool_call>`` or OpenAI ``tool_calls``, read by
:mod:`claw_envs.toolcall.actions`) or a fenced block tagged ``bash``, ``sh`` or ``shell``. A turn must hold
exactly one. A turn with no command and some words is the final message ("done"); a turn with no words
at all (empty, whitespace, punctuation) is a problem, so junk never ends an episode.

Reading is bounded (:class:`~claw_envs.toolcall.actions.ParseLimits`: JSON depth, turn size, calls per turn)
and linear in the text. A command over ``MAX_COMMAND_BYTES`` or holding a NUL or a lone surrogate (no
program can be handed one) is a problem too, never a sandbox failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.core import Message
from claw_envs.toolcall.actions import TURN_ERRORS, ParseLimits, ToolCall, ToolCallError, parse_action
from claw_envs.toolcall.schema import invalid_char

MAX_COMMAND_BYTES = 64 * 1024
"""Longest command line run, in UTF-8 bytes. Half the kernel's 128 KiB cap on one argument, so every backend can
run it as ``bash -c <command>`` (the local sandbox reads longer ones from a memory file; ``docker exec`` cannot)."""
MAX_CALLS_READ = 8
"""Tool calls read in one turn before it is refused whole (only one may run anyway)."""
LIMITS = ParseLimits(max_calls=MAX_CALLS_READ)

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run one bash command line in the task's working directory and return its stdout, stderr and exit "
            "status. Files persist between calls; there is no network and each call has a time limit."
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

_OPEN_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell)[ \t]*\n", re.I)
_CLOSE_FENCE = "```"


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


def read_turn(
    action: str,
    *,
    id_prefix: str = "call_",
    limits: ParseLimits = LIMITS,
    max_command_bytes: int = MAX_COMMAND_BYTES,
) -> Turn:
    """Classify ``action`` (see the module docstring); never raises."""
    parsed = parse_action(action, SCHEMAS, id_prefix=id_prefix, limits=limits)
    if parsed.items and isinstance(item := parsed.items[0], ToolCallError) and item.kind in TURN_ERRORS:
        if item.kind == "too_many_calls":
            return Turn(
                "problem",
                problem=f"the turn holds more than {limits.max_calls} tool calls and none was run; send exactly one "
                "command per turn and read its output first",
                tag="several_commands",
            )
        return Turn("problem", problem=item.message, tag=item.kind)
    fences = _fenced_blocks(parsed.text)
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
        return _command(item.arguments["command"], max_command_bytes, call=item, prose=parsed.text)
    if opened > len(fences):
        return Turn("problem", problem="the ```bash block is never closed: end it with ```", tag="unclosed_block")
    if fences:
        return _command(fences[0], max_command_bytes)
    if not re.search(r"\w", parsed.text):
        return Turn(
            "problem",
            problem="the turn is empty: run a command, or say in words that the task is done",
            tag="empty_action",
        )
    return Turn("final")


def _fenced_blocks(text: str) -> list[str]:
    """The bodies of the closed ```bash blocks of ``text``, in order (a linear scan: after an opening fence
    with no closing one, no later fence can close either)."""
    bodies = []
    pos = 0
    while (m := _OPEN_FENCE.search(text, pos)) is not None:
        end = text.find(_CLOSE_FENCE, m.end())
        if end == -1:
            break
        bodies.append(text[m.end() : end])
        pos = end + len(_CLOSE_FENCE)
    return bodies


def _command(
    command: str, max_bytes: int = MAX_COMMAND_BYTES, *, call: ToolCall | None = None, prose: str = ""
) -> Turn:
    command = command.strip()
    if not command:
        return Turn("problem", problem="the command is empty: put a shell command in it", tag="empty_command")
    if (bad := invalid_char(command)) is not None:
        return Turn("problem", problem=f"the command holds {bad}; write plain text", tag="invalid_character")
    size = len(command.encode("utf-8"))
    if size > max_bytes:
        return Turn(
            "problem",
            problem=f"the command is {size:,} bytes long and the limit is {max_bytes:,}: write a long file in "
            "several commands (cat >> file <<'EOF' ... EOF, a part each)",
            tag="command_too_long",
        )
    return Turn("command", command=command, call=call, prose=prose)


def tool_call_text(command: str) -> str:
    """A Hermes-format call of the bash tool."""
    return f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"


def fenced_text(command: str) -> str:
    """A fenced bash block."""
    return f"```bash\n{command}\n```"


def assistant_message(turn: Turn, action: str) -> Message:
    """The assistant turn as stored in the history: OpenAI ``tool_calls`` for a tool call, else the raw text."""
    if turn.call is None:
        return {"role": "assistant", "content": action}
    return {"role": "assistant", "content": turn.prose, "tool_calls": [turn.call.to_openai()]}


def reply_message(turn: Turn, text: str) -> Message:
    """The reply to a command: a ``tool`` message for a tool call, a ``user`` message for a ```bash block."""
    if turn.call is None:
        return {"role": "user", "content": text}
    return {"role": "tool", "tool_call_id": turn.call.id, "name": "bash", "content": text}
