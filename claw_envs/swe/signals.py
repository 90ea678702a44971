"""Score one SWE command: a shell command's report (shared with the terminal family), plus what matters in a
repository.

The base is :func:`claw_envs.shell_turns.report` (output head+tail with ``returncode=N``; +0.5 for exit 0,
-1 for a failure or a timeout, the error line explained). On top, each of these makes the step -1 with its
reason in the directive: a command repeated right after it failed (``repeated_failure``), an edit to one of
the instance's test files (``test_file_edit``: the hidden tests replace them), a Python file left with a
syntax error (``syntax_error``), and the repository's ``.git`` deleted (``git_deleted``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from claw_envs.core import Evaluative
from claw_envs.sandbox import ExecResult
from claw_envs.shell_turns import report


@dataclass
class Findings:
    """What the env noticed around a command, beyond its own result."""

    repeated_failure: bool = False
    test_edits: list[str] = field(default_factory=list)
    syntax_errors: str = ""
    git_deleted: bool = False


@dataclass(frozen=True)
class Signal:
    """The next state's text, evaluative score and directive for one command."""

    text: str
    evaluative: Evaluative
    directive: str | None


def command_signal(result: ExecResult, findings: Findings, *, timeout: float, max_chars: int) -> Signal:
    """The signal of one command (see the module docstring)."""
    base = report(result, timeout=timeout, max_chars=max_chars)
    notes: list[tuple[str, str, str]] = []  # (tag, text note, directive)
    if findings.repeated_failure:
        notes.append(
            (
                "repeated_failure",
                "[this exact command failed just before]",
                "You ran the same command that had just failed; read its error and change the command.",
            )
        )
    if findings.test_edits:
        names = ", ".join(findings.test_edits)
        notes.append(
            (
                "test_file_edit",
                f"[you changed the test file(s) {names}]",
                f"Do not edit the tests ({names}): grading replaces them with the hidden tests, so fix the code "
                "the issue is about instead.",
            )
        )
    if findings.syntax_errors:
        notes.append(
            (
                "syntax_error",
                f"[a Python file you edited no longer compiles]\n{findings.syntax_errors}",
                f"Your edit left a syntax error: {findings.syntax_errors.splitlines()[-1]}; fix the file (check "
                "indentation and brackets).",
            )
        )
    if findings.git_deleted:
        notes.append(
            (
                "git_deleted",
                "[the repository's .git is gone]",
                "You deleted the repository's .git; never remove the repository or its history, only edit files.",
            )
        )
    if not notes:
        return Signal(base.text, base.evaluative, base.directive)
    text = "\n".join([base.text, *(note for _, note, _ in notes)])
    tags = (*base.evaluative.tags, *(tag for tag, _, _ in notes))
    directives = [d for _, _, d in notes] + ([base.directive] if base.directive else [])
    return Signal(text, Evaluative(-1.0, tags), " ".join(directives))
