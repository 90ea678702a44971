"""Read one SWE turn: a bash command, a submission, or a problem.

A command is a ``bash`` tool call or one fenced ```bash block, read exactly as in the terminal family
(:func:`claw_envs.shell_turns.read_turn`: bounded, one command per turn). The agent submits with a
``submit`` tool call, or — the mini-swe-agent convention — with a command whose output's first line is
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (:func:`submits`). Words with no command are a problem here (an SWE
episode ends only by submitting), so junk never ends an episode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.shell_turns import BASH_TOOL, LIMITS, MAX_COMMAND_BYTES
from claw_envs.shell_turns import read_turn as read_command
from claw_envs.tool_calls.parse import ToolCall, parse_action

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
SUBMIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Submit your changes to the repository as the fix; the hidden tests then grade them. "
        "This ends the task.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}
TOOLS = [BASH_TOOL, SUBMIT_TOOL]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@dataclass(frozen=True)
class Turn:
    """What the agent did: ``command`` (run ``command``), ``submit`` or ``problem`` (see ``problem``/``tag``).

    ``call`` is the tool call when the turn came as one (its id answers the tool message), ``prose`` the text
    around it.
    """

    kind: Literal["command", "submit", "problem"]
    command: str = ""
    call: ToolCall | None = None
    prose: str = ""
    problem: str = ""
    tag: str = ""


def read_turn(action: str, *, id_prefix: str = "call_", max_command_bytes: int = MAX_COMMAND_BYTES) -> Turn:
    """Classify ``action`` (see the module docstring); never raises."""
    parsed = parse_action(action, SCHEMAS, id_prefix=id_prefix, limits=LIMITS)
    submits_ = [c for c in parsed.calls if c.name == "submit"]
    if submits_ and len(parsed.items) == 1:
        return Turn("submit", call=submits_[0], prose=parsed.text)
    if submits_:
        return Turn(
            "problem",
            problem="the turn both runs a command and submits; run the command, read its output, then submit alone",
            tag="several_commands",
        )
    turn = read_command(action, id_prefix=id_prefix, max_command_bytes=max_command_bytes)
    if turn.kind == "final" or turn.tag == "empty_action":
        what = "is empty" if turn.kind == "problem" else "has no command"
        return Turn(
            "problem",
            problem=f"the turn {what}: run one bash command, or submit your fix with the submit tool "
            f"(or a command whose output starts with {SUBMIT_MARKER})",
            tag=turn.tag or "no_command",
        )
    return Turn(turn.kind, command=turn.command, call=turn.call, prose=turn.prose, problem=turn.problem, tag=turn.tag)


def submits(stdout: str) -> bool:
    """Whether a command's output submits (its first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``)."""
    return stdout.lstrip("\n").split("\n", 1)[0].strip() == SUBMIT_MARKER


def tool_call_text(name: str, arguments: dict[str, Any] | None = None) -> str:
    """A Hermes-format tool call."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments or {}})}</tool_call>"
