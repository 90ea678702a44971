"""Reading shell text the way task folders write it: commands split at ``&&`` and ``;`` (quotes, ``$(...)`` and
backquotes respected), script lines with continuations joined and heredoc bodies left out, words with leading
``VAR=value`` and ``sudo`` dropped, and the package installs in them (``apt-get install``, ``pip install``,
``uv add``, ``uvx --with``)."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re.compile(r"^(?:\d*[<>]|&>)")
_PIP = re.compile(r"^pip(?:\d+(?:\.\d+)?)?$")
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")
_WITH_VALUE = """-r --requirement -c --constraint -i --index-url --extra-index-url -f --find-links --trusted-host
--progress-bar --root-user-action --python -t --target --prefix --root --platform --python-version --implementation
--abi --cache-dir --timeout --retries"""
PIP_FLAGS_WITH_VALUE = frozenset(_WITH_VALUE.split())
PIP_OPTIONS_KEPT = frozenset({"-i", "--index-url", "--extra-index-url", "-f", "--find-links"})
"""pip options that change what gets installed, kept for the task's virtualenv (the rest are about the image)."""


def split_commands(text: str) -> list[str]:
    """The top-level commands of a shell line: split at ``&&``, ``;`` and newlines outside quotes, ``$(...)``,
    backquotes and braces/parentheses; ``||`` and ``|`` chains stay whole."""
    parts, current, i = [], [], 0
    quote, depth = "", 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and quote != "'" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth = max(depth - 1, 0)
        elif depth == 0 and (text.startswith("&&", i) or ch in ";\n"):
            parts.append("".join(current))
            current = []
            i += 2 if ch == "&" else 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def pipeline(command: str) -> list[str]:
    """A command's parts joined by ``|`` or ``||`` (outside quotes)."""
    parts, current, quote = [], "", ""
    i = 0
    while i < len(command):
        ch = command[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "|":
            parts.append(current)
            current = ""
            i += 2 if command.startswith("||", i) else 1
            continue
        current += ch
        i += 1
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def argv(command: str) -> list[str]:
    """The words of a simple command without leading ``VAR=value``, ``sudo``/``env`` and redirections."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    words = [w for w in words if not _REDIRECT.match(w)]
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("sudo", "env", "exec", "time", "command")):
        words = words[1:]
    return words


def program(words: list[str]) -> str:
    """The program a command runs, by base name (``""`` for none)."""
    return posixpath.basename(words[0]) if words else ""


def script_commands(text: str) -> list[str]:
    """The commands of a shell script: continuation lines joined, comments and heredoc bodies dropped, each line
    split with :func:`split_commands`."""
    commands, current, ending = [], "", None
    for raw in text.splitlines():
        if ending is not None:
            if raw.strip() == ending:
                ending = None
            continue
        stripped = raw.strip()
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        line, current = (current + stripped).strip(), ""
        if not line or line.startswith("#"):
            continue
        heredoc = _HEREDOC.search(line)
        if heredoc:
            ending = heredoc.group(2)
            line = line[: heredoc.start()]
        commands.extend(split_commands(line))
    return commands


@dataclass
class PipInstall:
    """What a ``pip install`` (or ``uv add``, ``uvx --with``) asks for: requirement specifiers, files of
    requirements, the options kept for the virtualenv, and words that are not requirements (local paths, ``-e``)."""

    requirements: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)


def pip_install(words: list[str]) -> PipInstall | None:
    """The install a command's words make, or ``None`` when it is not one. Understood: ``pip``/``pip3``/``pip3.X``
    (by any path), ``python[3] -m pip``, ``uv pip install``, ``uv add``, ``uvx``/``uv tool run`` ``--with``."""
    prog, rest = program(words), words[1:]
    if _PYTHON.match(prog) and rest[:2] == ["-m", "pip"]:
        prog, rest = "pip", rest[2:]
    if prog == "uv" and rest[:1] == ["pip"]:
        prog, rest = "pip", rest[1:]
    if prog == "uv" and rest[:1] == ["add"]:
        return _requirements(rest[1:])
    if prog == "uvx" or (prog == "uv" and rest[:2] == ["tool", "run"]):
        return _uvx_with(rest)
    if not _PIP.match(prog) or rest[:1] != ["install"]:
        return None
    return _requirements(rest[1:])


def _requirements(words: list[str]) -> PipInstall:
    out = PipInstall()
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        if word.startswith("-") and flag in PIP_FLAGS_WITH_VALUE:
            if not eq:
                i += 1
                value = words[i] if i < len(words) else ""
            if flag in ("-r", "--requirement"):
                out.files.append(value)
            elif flag in PIP_OPTIONS_KEPT:
                out.options += [flag, value]
        elif word in ("-e", "--editable"):
            i += 1
            out.local.append(" ".join(words[i - 1 : i + 1]))
        elif word.startswith("-"):
            pass  # --no-cache-dir, --upgrade, --break-system-packages, --user, --system, -q ...
        elif word.startswith((".", "/", "~")) or "://" in word or word.endswith((".whl", ".tar.gz", ".zip")):
            out.local.append(word)
        else:
            out.requirements.append(word)
        i += 1
    return out


def _uvx_with(words: list[str]) -> PipInstall:
    out = PipInstall()
    for i, word in enumerate(words[:-1]):
        if word in ("-w", "--with"):
            out.requirements.append(words[i + 1])
    return out


def apt_install(words: list[str]) -> list[str] | None:
    """The packages an ``apt-get``/``apt``/``apt-fast``/``aptitude install`` names (version pins and architectures
    dropped), or ``None`` when the command is not one."""
    if program(words) not in ("apt-get", "apt", "apt-fast", "aptitude"):
        return None
    rest = words[1:]
    names, i, seen_install = [], 0, False
    while i < len(rest):
        word = rest[i]
        if word in ("-o", "-t", "--target-release", "-c"):
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        if not seen_install:
            if word != "install":
                return None
            seen_install = True
        else:
            names.append(re.split(r"[=:]", word, maxsplit=1)[0])
        i += 1
    return names if seen_install else None
