"""Task folders in the Terminal-Bench 1 and Harbor (Terminal-Bench 2) layouts, read into terminal task data.

The layout is detected per folder: **Harbor** has ``task.toml`` and ``instruction.md`` (``environment/Dockerfile``,
``tests/test.sh`` writing ``/logs/verifier/reward.txt`` or ``reward.json``, ``solution/solve.sh``); **TB1** has
``task.yaml`` (``Dockerfile``, ``run-tests.sh``, ``tests/``, ``solution.sh`` or ``solution.yaml``). TB1's first
releases kept the instruction in ``descriptions`` (the ``base`` one) and shared their test scripts across a dataset:
a task folder inside ``<dataset>/tasks/`` without a ``run-tests.sh`` runs ``<dataset>/defaults/run-tests.sh``, with
the ``test_scripts`` it names from ``<dataset>/scripts/`` beside its tests.

Read from the metadata: the instruction; ``[agent] timeout_sec`` / ``max_agent_timeout_sec`` (the agent's time for
the episode); ``[verifier] timeout_sec`` / ``max_test_timeout_sec`` (the tests' time). From the Dockerfile: see
:mod:`.dockerfile`. From the test script and the solution: the packages they ``pip install`` (``test_pip``,
``solution_pip``; see :mod:`.provision`). A folder whose metadata is missing or malformed, or that has no tests,
raises ``ValueError`` naming the folder and the fault: :class:`HalfTask` when it is half a task (no instruction or
no tests), which a folder of many tasks skips, naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import yaml

from claw_envs.terminal.dockerfile import read_dockerfile
from claw_envs.terminal.shellwords import argv, pip_install, pipeline, script_commands

DEFAULT_VERIFIER_TIMEOUT = 600.0
_TB1_PRIVATE = {"task.yaml", "run-tests.sh", "solution.sh", "solution.yaml", "tests", "Dockerfile"}


class HalfTask(ValueError):
    """A folder that is half a task: its instruction or its tests are missing."""


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
    scripts = [folder / data["test_script"], *(folder / h for h in data.get("test_helpers", []))]
    data["test_pip"] = _pip_lines(" \n".join(p.read_text(encoding="utf-8", errors="replace") for p in scripts))
    solution = "\n".join(data.get("solution", []))
    if data.get("solution_script"):
        solution = (folder / data["solution_script"]).read_text(encoding="utf-8", errors="replace")
    data["solution_pip"] = _pip_lines(solution)
    data["digest"] = _digest(folder, [p for p in scripts if not p.resolve().is_relative_to(folder)])
    return data


def _pip_lines(script: str) -> list[str]:
    """The requirements a script installs with pip or uv (each once, in order)."""
    found: list[str] = []
    for command in script_commands(script):
        for part in pipeline(command):
            pip = pip_install(argv(part))
            if pip is not None:
                found += [r for r in pip.requirements if r not in found and r != "pip"]
    return found


def _harbor(folder: Path) -> dict[str, Any]:
    meta_path = folder / "task.toml"
    if not meta_path.is_file():
        raise ValueError(f"{folder}: a Harbor task folder needs task.toml next to instruction.md")
    if not (folder / "instruction.md").is_file():
        raise HalfTask(f"{folder}: a Harbor task folder needs instruction.md next to task.toml")
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{meta_path}: not valid TOML ({err})") from None
    verifier = _table(meta, "verifier", meta_path)
    agent = _table(meta, "agent", meta_path)
    if not (folder / "tests" / "test.sh").is_file():
        raise HalfTask(f"{folder}: no tests (tests/test.sh is missing)")
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
    instruction = meta.get("instruction", _base_description(meta))
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"{meta_path}: 'instruction' must be a non-empty string")
    parser = meta.get("parser_name", "pytest")
    if parser != "pytest":
        raise ValueError(f"{meta_path}: parser_name {parser!r} is not supported (only pytest)")
    run_tests, helpers = _tb1_test_scripts(folder, meta, meta_path)
    if run_tests is None or not (folder / "tests").is_dir():
        raise HalfTask(f"{folder}: no tests (run-tests.sh and tests/ are both needed)")
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
        "test_script": run_tests,
        "test_helpers": helpers,
        "solution_script": "solution.sh" if (folder / "solution.sh").is_file() else None,
        **({"solution": steps} if steps else {}),
    }


def _base_description(meta: dict[str, Any]) -> str | None:
    """The instruction of TB1's first releases: the ``base`` entry of ``descriptions`` (else the first)."""
    entries = meta.get("descriptions")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        return None
    entry = next((e for e in entries if e.get("key") == "base"), entries[0])
    return entry.get("description")


def _tb1_test_scripts(folder: Path, meta: dict[str, Any], where: Path) -> tuple[str | None, list[str]]:
    """The test script (relative to the folder) and the helper scripts it may source: the folder's
    ``run-tests.sh``, or its dataset's default (``<dataset>/defaults/run-tests.sh``); the ``test_scripts`` found in
    ``<dataset>/scripts`` (those in ``tests/`` are there already)."""
    dataset = folder.parent.parent if folder.parent.name == "tasks" else None
    names = meta.get("test_scripts") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: test_scripts must be a list of file names")
    helpers = []
    for name in names:
        path = dataset / "scripts" / name if dataset else None
        if path is not None and path.is_file() and not (folder / "tests" / name).is_file():
            helpers.append(os.path.relpath(path, folder))
    if (folder / "run-tests.sh").is_file():
        return "run-tests.sh", helpers
    default = dataset / "defaults" / "run-tests.sh" if dataset else None
    return (os.path.relpath(default, folder) if default and default.is_file() else None), helpers


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


def _digest(folder: Path, shared: list[Path]) -> str:
    """SHA-256 over every file's relative path and bytes (and the dataset scripts it uses), so a task's hash
    changes with its files."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    for path in shared:
        h.update(json.dumps(os.path.relpath(path, folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
