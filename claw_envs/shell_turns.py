"""A shell agent's turn, as the terminal and SWE families share it: the command read out of the model's text,
and the report of its result.

**Reading** (:func:`read_turn`). A command is a call of the ``bash`` tool (Hermes ``<tool_call>`` or OpenAI
``tool_calls``, read by :mod:`claw_envs.tool_calls.parse`) or a fenced block tagged ``bash``, ``sh`` or ``shell``.
A turn must hold exactly one. A turn with no command and some words is the final message ("done"); a turn with no
words at all (empty, whitespace, punctuation) is a problem, so junk never ends an episode. Reading is bounded
(:class:`~claw_envs.tool_calls.parse.ParseLimits`: JSON depth, turn size, calls per turn) and linear in the text. A
command over ``MAX_COMMAND_BYTES`` or holding a NUL or a lone surrogate (no program can be handed one) is a
problem too, never a sandbox failure.

**Reporting** (:func:`report`): the command's result as the next state's text, evaluative score and directive.
Scores: **+0.5** when the command exited 0 (it ran as written; whether it moved the task forward is for the
outcome and a model judge to say, so a clean run is only mildly positive), **0** when it exited 0 but its output
was too long and was cut, **-1** when it exited non-zero or ran past the time limit. The directive quotes the
error line and says what it usually means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from claw_envs.core import Evaluative, Message
from claw_envs.sandbox.base import ExecResult
from claw_envs.sandbox.limits import DISK_QUOTA_NOTE
from claw_envs.sandbox.output import cap_text
from claw_envs.tool_calls.parse import TURN_ERRORS, ParseLimits, ToolCall, ToolCallError, parse_action
from claw_envs.tool_calls.schema import invalid_char

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


# -- the result of a command --------------------------------------------------------------------------------------

CLEAN_RUN_SCORE = 0.5

# (pattern over an error line, what it means); the first pattern that matches a line of stderr wins
_EXPLANATIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(re.escape(DISK_QUOTA_NOTE)),
        "delete files you no longer need (rm) and write less: keep only what the task needs",
    ),
    (
        re.compile(r"No space left on device|Disk quota exceeded"),
        "the disk is full; delete files you no longer need (rm) and write less",
    ),
    (
        re.compile(r"command not found"),
        "the command does not exist here; use a standard tool (ls, cat, grep, sed, awk, sort, find, tar, …)",
    ),
    (
        re.compile(r"No such file or directory"),
        "that path does not exist; list the directory (ls) to see what is there",
    ),
    (
        re.compile(r"Read-only file system"),
        "only the working directory and /tmp can be written; keep your files inside the working directory",
    ),
    (
        re.compile(r"Permission denied|Operation not permitted"),
        "this user may not do that; work on files in the working directory, and make scripts executable with chmod +x",
    ),
    (
        re.compile(r"syntax error|unexpected EOF|unexpected end of file"),
        "bash could not parse the command; check its quotes, brackets and keywords",
    ),
    (
        re.compile(r"[Ii]nvalid option|unrecognized option|illegal option|[Uu]sage:|missing operand"),
        "the tool was called with the wrong options or arguments; check its usage line",
    ),
    (
        re.compile(r"Is a directory|Not a directory"),
        "a file was used where a directory is needed, or the other way round",
    ),
)


@dataclass(frozen=True)
class CommandReport:
    """What the model reads after a command, and how the step is scored."""

    text: str
    evaluative: Evaluative
    directive: str | None


def report(result: ExecResult, *, timeout: float, max_chars: int) -> CommandReport:
    """The next state of a command (see the module docstring for the scores)."""
    stdout, cut_out = cap_text(result.stdout, max_chars)
    stderr, cut_err = cap_text(result.stderr, max_chars // 2)
    cut = result.truncated or cut_out or cut_err
    parts = [stdout.rstrip("\n")] if stdout.strip() else []
    if stderr.strip():
        parts.append(f"stderr:\n{stderr.rstrip()}")
    if cut:
        parts.append(f"[the output was too long and was cut to its head and tail, about {max_chars} characters]")
    code = f"returncode={result.returncode}"
    if result.timed_out:
        parts.append(f"[the command ran longer than the {timeout:g}-second limit and was killed]")
        score, tags = -1.0, ("timeout", code)
        directive: str | None = (
            f"The command did not finish within {timeout:g} s: do not start commands that run forever or wait "
            "for input (pass files as arguments, use head, add a timeout)."
        )
    else:
        parts.append(code)
        if result.returncode != 0:
            score, tags, directive = -1.0, (code,), explain(result)
        elif cut:
            score, tags = 0.0, (code, "output_truncated")
            directive = "The output was too long to read: show only what you need (head, tail, grep, wc)."
        else:
            score, tags, directive = CLEAN_RUN_SCORE, (code,), None
    return CommandReport("\n".join(parts), Evaluative(score, tags), directive)


def explain(result: ExecResult) -> str:
    """A directive for a failed command: the error line quoted, and what it means."""
    lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
    for pattern, meaning in _EXPLANATIONS:
        for line in lines:
            if pattern.search(line):
                return f"`{_short(line)}` — {meaning}."
    if lines:
        return f"The command failed with exit status {result.returncode}: `{_short(lines[-1])}`."
    return (
        f"The command exited with status {result.returncode} and printed no error; for grep and test that means "
        "'not found' or 'false', so check what you assumed."
    )


def _short(line: str, limit: int = 200) -> str:
    line = re.sub(r"^(?:/bin/|/usr/bin/)?(?:bash|sh): (?:line \d+: )?", "", line)
    return line if len(line) <= limit else line[: limit - 1] + "…"
