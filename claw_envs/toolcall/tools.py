"""The tools a model may call, described by JSON schema, and how the ``python`` tool's result is reported."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from claw_envs.sandbox.base import ExecResult, Sandbox
from claw_envs.sandbox.output import cap_text


@dataclass(frozen=True)
class Tool:
    """A callable tool: ``parameters`` is the JSON schema of its arguments object."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry (``{"type": "function", "function": {...}}``)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


PYTHON = Tool(
    name="python",
    description=(
        "Run a Python 3 program and return what it prints. Each call starts a fresh interpreter (variables do "
        "not carry over between calls); there is no network and a time limit. Use print() to see values."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The complete program to run."}},
        "required": ["code"],
        "additionalProperties": False,
    },
)

TOOLS: dict[str, Tool] = {PYTHON.name: PYTHON}


@dataclass(frozen=True)
class ToolOutput:
    """What one tool call returned, as the model will read it, and how the step rule scores it.

    ``score`` is -1 (exception, timeout, killed), 0 (ran but printed nothing or too much) or +1.
    """

    text: str
    score: float
    tags: tuple[str, ...]
    directive: str | None = None


async def run_python(sandbox: Sandbox, code: str, *, timeout: float, max_chars: int) -> ToolOutput:
    """Run ``code`` with the sandbox's Python (read from stdin, so no file is left behind) and report it.

    Raises whatever the sandbox raises for its own failures (``SandboxError``); the env turns that into
    an infrastructure failure.
    """
    python = getattr(sandbox, "python", "python3")
    env = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
    result = await sandbox.arun([python, "-"], timeout=timeout, env=env, stdin=code)
    return format_python_result(result, timeout=timeout, max_chars=max_chars)


def format_python_result(result: ExecResult, *, timeout: float, max_chars: int) -> ToolOutput:
    """Turn an :class:`ExecResult` into the tool message and its step score (the rule in ``ToolOutput``)."""
    stdout, cut_out = cap_text(result.stdout, max_chars)
    stderr, cut_err = cap_text(result.stderr, max_chars // 2)
    truncated = result.truncated or cut_out or cut_err
    parts = [stdout.rstrip("\n")] if stdout.strip() else []
    if result.timed_out:
        parts.append(
            f"Error: the program ran longer than the {timeout:g}-second limit and was stopped."
            + (f"\n{stderr.rstrip()}" if stderr.strip() else "")
        )
        return ToolOutput(
            "\n".join(parts),
            -1.0,
            ("timeout",),
            f"The code did not finish within {timeout:g} s: avoid endless loops and use a faster method.",
        )
    if result.returncode != 0:
        exception = last_error_line(stderr)
        signum = -result.returncode if result.returncode < 0 else result.returncode - 128
        if stderr.strip():
            parts.append(stderr.rstrip())
        if exception:
            tags = (f"returncode={result.returncode}", f"exception={exception.split(':')[0]}")
            return ToolOutput("\n".join(parts), -1.0, tags, traceback_tail(stderr))
        if signum > 0:
            parts.append(f"Error: the program was killed by signal {signum} (it hit a memory, CPU or process limit).")
        else:
            parts.append(f"Error: the program exited with status {result.returncode}.")
        directive = parts[-1].removeprefix("Error: ")
        return ToolOutput("\n".join(parts), -1.0, (f"returncode={result.returncode}",), directive)
    if stderr.strip():
        parts.append(f"stderr:\n{stderr.rstrip()}")
    if truncated:
        parts.append(f"Error: the output was too long and was cut to {max_chars} characters; print less.")
        return ToolOutput(
            "\n".join(parts), 0.0, ("returncode=0", "output_truncated"), "Print only the values you need."
        )
    if not stdout.strip():
        parts.append("(no output: the program printed nothing; use print() to see values)")
        return ToolOutput("\n".join(parts), 0.0, ("returncode=0", "no_output"), "Print the result with print().")
    return ToolOutput("\n".join(parts), 1.0, ("returncode=0",))


def last_error_line(stderr: str) -> str:
    """The exception line of a Python traceback (``ZeroDivisionError: division by zero``), or ``""``."""
    for line in reversed(stderr.strip().splitlines()):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b", line):
            return line.strip()
    return ""


def traceback_tail(stderr: str, max_lines: int = 6, max_chars: int = 600) -> str:
    """The last lines of a traceback: the directive that says what went wrong."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    tail = "\n".join(lines[-max_lines:])
    return tail[-max_chars:]
