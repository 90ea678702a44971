"""Task folders in the Terminal-Bench 1 and Harbor (Terminal-Bench 2) layouts, read into terminal task data.

The layout is detected per folder: **Harbor** has ``task.toml`` and ``instruction.md`` (``environment/Dockerfile``,
``tests/test.sh`` writing ``/logs/verifier/reward.txt`` or ``reward.json``, ``solution/solve.sh``); **TB1** has
``task.yaml`` (``Dockerfile``, ``run-tests.sh``, ``tests/``, ``solution.sh`` or ``solution.yaml``).

Read from the metadata: the instruction; ``[agent] timeout_sec`` / ``max_agent_timeout_sec`` (the agent's time for
the episode); ``[verifier] timeout_sec`` / ``max_test_timeout_sec`` (the tests' time). Read from the Dockerfile:
``WORKDIR`` (the last one; ``/app`` without one), ``COPY``/``ADD`` of files of the build context into the workdir,
``ENV``, and ``RUN`` lines (see :func:`read_dockerfile`). Everything else there (``FROM``, ``USER``, ``EXPOSE``,
``CMD``, ``ENTRYPOINT``, ``LABEL``, ``ARG``...) is ignored: the local backend runs on this machine's system with this
project's Python. A folder whose metadata is missing or malformed, or that has no tests, raises ``ValueError``
naming the folder and the fault.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import posixpath
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

DEFAULT_WORKDIR = "/app"
DEFAULT_VERIFIER_TIMEOUT = 600.0
LOCAL_RUN_PROGRAMS = frozenset(
    "mkdir touch echo printf cat cp mv rm ln chmod tar gzip gunzip git sed awk sort head tail true python python3 "  # noqa: SIM905
    "cd find xargs tee seq".split()
)
"""Programs a Dockerfile ``RUN`` line may use and still run on the local backend (in the workdir, as setup)."""
PIP_INSTALL = re.compile(r"^(?:python3? -m )?(?:uv )?pip3? install\b")
_TB1_PRIVATE = {"task.yaml", "run-tests.sh", "solution.sh", "solution.yaml", "tests", "Dockerfile"}


def is_task_folder(path: Path) -> bool:
    """Whether ``path`` looks like a task folder of either layout (it has any of their marker files)."""
    return any((path / name).exists() for name in ("task.toml", "task.yaml", "instruction.md"))


def read_folder(folder: Path) -> dict[str, Any]:
    """The terminal task data of one task folder (fields in :mod:`claw_envs.terminal.tasks`)."""
    folder = folder.resolve()
    if (folder / "task.toml").exists() or (folder / "instruction.md").exists():
        data = _harbor(folder)
    elif (folder / "task.yaml").exists():
        data = _tb1(folder)
    else:
        raise ValueError(f"{folder}: not a task folder (no task.toml + instruction.md, no task.yaml)")
    data["digest"] = _digest(folder)
    return data


def _harbor(folder: Path) -> dict[str, Any]:
    meta_path = folder / "task.toml"
    if not meta_path.is_file():
        raise ValueError(f"{folder}: a Harbor task folder needs task.toml next to instruction.md")
    if not (folder / "instruction.md").is_file():
        raise ValueError(f"{folder}: a Harbor task folder needs instruction.md next to task.toml")
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{meta_path}: not valid TOML ({err})") from None
    verifier = _table(meta, "verifier", meta_path)
    agent = _table(meta, "agent", meta_path)
    if not (folder / "tests" / "test.sh").is_file():
        raise ValueError(f"{folder}: no tests (tests/test.sh is missing)")
    solution = folder / "solution" / "solve.sh"
    dockerfile = folder / "environment" / "Dockerfile"
    return {
        "format": "harbor",
        "folder": str(folder),
        "instruction": _text(folder / "instruction.md"),
        **read_dockerfile(dockerfile, context=folder / "environment", folder=folder),
        "agent_timeout": _seconds(agent, "timeout_sec", meta_path),
        "verifier_timeout": _seconds(verifier, "timeout_sec", meta_path) or DEFAULT_VERIFIER_TIMEOUT,
        "tests": "tests",
        "test_script": "tests/test.sh",
        "solution_script": "solution/solve.sh" if solution.is_file() else None,
    }


def _tb1(folder: Path) -> dict[str, Any]:
    meta_path = folder / "task.yaml"
    try:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"{meta_path}: not valid YAML ({err})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: expected a mapping of fields, got {type(meta).__name__}")
    instruction = meta.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"{meta_path}: 'instruction' must be a non-empty string")
    parser = meta.get("parser_name", "pytest")
    if parser != "pytest":
        raise ValueError(f"{meta_path}: parser_name {parser!r} is not supported (only pytest)")
    if not (folder / "run-tests.sh").is_file() or not (folder / "tests").is_dir():
        raise ValueError(f"{folder}: no tests (run-tests.sh and tests/ are both needed)")
    steps = None
    if (folder / "solution.yaml").is_file():
        steps = _solution_steps(folder / "solution.yaml")
    return {
        "format": "tb1",
        "folder": str(folder),
        "instruction": instruction.strip(),
        **read_dockerfile(folder / "Dockerfile", context=folder, folder=folder, private=_TB1_PRIVATE),
        "agent_timeout": _seconds(meta, "max_agent_timeout_sec", meta_path),
        "verifier_timeout": _seconds(meta, "max_test_timeout_sec", meta_path) or DEFAULT_VERIFIER_TIMEOUT,
        "tests": "tests",
        "test_script": "run-tests.sh",
        "solution_script": "solution.sh" if (folder / "solution.sh").is_file() else None,
        **({"solution": steps} if steps else {}),
    }


def read_dockerfile(
    path: Path, *, context: Path, folder: Path, private: frozenset[str] | set[str] = frozenset()
) -> dict[str, Any]:
    """What the local backend takes from a Dockerfile: ``workdir``, ``copies`` (``[source relative to the task
    folder, destination inside]``), ``env``, ``setup`` (RUN lines it can run itself) and ``unsupported`` (lines
    only an image build can do, with why). ``context`` is the build context, ``folder`` the task folder; ``private``
    names context entries never copied by ``COPY .`` (the tests and the solution stay hidden)."""
    out: dict[str, Any] = {"workdir": DEFAULT_WORKDIR, "copies": [], "env": {}, "setup": [], "unsupported": []}
    if not path.is_file():
        return out
    workdir = "/"
    base = folder
    seen_workdir = False
    for line in _instructions(path.read_text(encoding="utf-8", errors="replace")):
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, rest.strip("\"'")))
            seen_workdir = True
        elif word == "ENV":
            out["env"].update(_env_pairs(rest))
        elif word in ("COPY", "ADD"):
            problem = _copy(rest, workdir, context, base, private, out["copies"])
            if problem:
                out["unsupported"].append(f"{line} ({problem})")
        elif word == "RUN":
            problem = _run_problem(rest)
            if problem:
                out["unsupported"].append(f"{line} ({problem})")
            elif not _only_pip(rest):  # a pip install of what this environment has is already done
                out["setup"].append(rest)
    out["workdir"] = workdir = workdir if seen_workdir else DEFAULT_WORKDIR
    for src, dest in out["copies"]:
        if not _under(dest, workdir):
            out["unsupported"].append(f"COPY {src} {dest} (the local backend shows only the workdir {workdir})")
    out["copies"] = [[src, dest] for src, dest in out["copies"] if _under(dest, workdir)]
    return out


def _instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _env_pairs(rest: str) -> dict[str, str]:
    words = shlex.split(rest)
    if len(words) >= 2 and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words if "=" in word)


def _copy(
    rest: str, workdir: str, context: Path, base: Path, private: frozenset[str] | set[str], copies: list[list[str]]
) -> str | None:
    """Add a ``COPY``'s sources to ``copies``; what the local backend cannot honour about it, or ``None``."""
    words = [w for w in (shlex.split(rest) if not rest.startswith("[") else _json_words(rest)) if w]
    flags = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return "copies from another build stage or image"
    if len(words) < 2:
        return "no source or destination"
    *sources, dest = words
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    for source in sources:
        if re.match(r"^[a-z]+://", source):
            return "downloads from the network"
        host = (context / source).resolve()
        if not host.is_relative_to(context.resolve()) or not host.exists():
            return f"{source} is not a file of the build context"
        if host == context.resolve():
            skip = {*private, "Dockerfile", "__pycache__"}
            names = sorted(p.name for p in host.iterdir() if p.name not in skip)
            copies.extend([str((host / n).relative_to(base)), posixpath.join(dest_abs, n)] for n in names)
        elif host.is_dir() or dest.endswith("/") or len(sources) > 1:
            target = dest_abs if host.is_dir() and not dest.endswith("/") else posixpath.join(dest_abs, host.name)
            copies.append([str(host.relative_to(base)), target])
        else:
            copies.append([str(host.relative_to(base)), dest_abs])
    return None


def _json_words(rest: str) -> list[str]:
    try:
        words = json.loads(rest)
    except ValueError:
        return []
    return [str(w) for w in words] if isinstance(words, list) else []


def _run_problem(command: str) -> str | None:
    """Why the local backend cannot run this ``RUN`` command itself, or ``None`` when it can (or need not)."""
    parts = _parts(command)
    pips = [part for part in parts if PIP_INSTALL.match(part)]
    for part in pips:
        missing = [p for p in _pip_packages(part) if not _installed(p)]
        if missing:
            return f"installs {', '.join(missing)}, which this environment lacks"
    if pips and len(pips) < len(parts):
        return "mixes pip install with other commands"
    for part in parts:
        program = posixpath.basename(part.split()[0])
        if not PIP_INSTALL.match(part) and program not in LOCAL_RUN_PROGRAMS:
            return f"runs {program}, which only an image build can do"
    return None


def _parts(command: str) -> list[str]:
    """The simple commands of a shell line (split at ``&&``, ``||``, ``;`` and ``|``)."""
    return [part.strip() for part in re.split(r"&&|\|\||;|\|", command) if part.strip()]


def _only_pip(command: str) -> bool:
    return all(PIP_INSTALL.match(part) for part in _parts(command))


def _pip_packages(part: str) -> list[str]:
    words = part.split()
    names = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    return [re.split(r"[=<>!~\[;]", name)[0] for name in names]


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _solution_steps(path: Path) -> list[str]:
    try:
        steps = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(steps, list) or not all(isinstance(s, dict) and isinstance(s.get("command"), str) for s in steps):
        raise ValueError(f"{path}: expected a list of {{command: ...}} steps")
    return [s["command"].strip() for s in steps]


def _table(meta: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    table = meta.get(name, {})
    if not isinstance(table, dict):
        raise ValueError(f"{where}: [{name}] must be a table")
    return table


def _seconds(table: dict[str, Any], key: str, where: Path) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where}: {key} must be a positive number of seconds, got {value!r}")
    return float(value)


def _text(path: Path) -> str:
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise ValueError(f"{path}: the instruction is empty")
    return text


def _digest(folder: Path) -> str:
    """SHA-256 over every file's relative path and bytes, so a task's hash changes with its files."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
