"""Turn a command's result into the next state's text, evaluative score and directive.

Scores: **+0.5** when the command exited 0 (it ran as written; whether it moved the task forward is
for the outcome and a model judge to say, so a clean run is only mildly positive), **0** when it exited
0 but its output was too long and was cut, **-1** when it exited non-zero or ran past the time limit.
The directive quotes the error line and says what it usually means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from claw_envs.core import Evaluative
from claw_envs.sandbox import ExecResult
from claw_envs.sandbox.limits import DISK_QUOTA_NOTE
from claw_envs.toolcall.tools import cap_text

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
