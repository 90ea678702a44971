"""Cached per-task virtualenvs: what a task folder's ``pip install`` lines ask for, isolated from this project.

A task's environment is a virtualenv of this project's base interpreter with no view of any other site-packages
(``import trl`` fails in it even though claw runs on trl). Its packages come from the package registries through
the virtualenv's own pip; only the tools are seeded from this installation, so a task that asks for nothing (or
only for a test runner) needs no network: ``pip`` always, and ``pytest`` (with what it depends on) when this
installation's version meets the task's pin.

Built virtualenvs are cached under ``~/.cache/claw/terminal-venvs`` (``$CLAW_TERMINAL_VENVS`` moves it), keyed by
everything that changes them: the requirement lines, pip's options, the interpreter's real path and version, and
the seeded tools' versions. A build runs under a file lock in a folder of its own and is committed by atomically
replacing the key's symlink; a build that died half-way is never taken as complete, and is swept by the next one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from claw_envs.cache import cached

FORMAT = 2  # 2: seeded packages are byte-compiled
READY = "claw-ready.json"
INSTALL_TIMEOUT = 1800.0
SEEDABLE = frozenset({"pytest"})
"""Requirements copied from this installation when its version fits (besides ``pip``, always seeded)."""


class VenvError(RuntimeError):
    """A task's virtualenv could not be built (the message names what pip said)."""


def cache_root() -> Path:
    """Where task virtualenvs are cached (``$CLAW_TERMINAL_VENVS`` or ``~/.cache/claw/terminal-venvs``)."""
    return Path(os.environ.get("CLAW_TERMINAL_VENVS") or Path.home() / ".cache" / "claw" / "terminal-venvs")


def base_python() -> str:
    """The interpreter task virtualenvs are made from: this project's base interpreter, by its real path."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def ensure_venv(requirements: Sequence[str], options: Sequence[str] = (), *, root: Path | None = None) -> Path:
    """The cached virtualenv holding ``requirements`` (pip requirement specifiers; ``options`` are pip's, such as
    ``--index-url URL``), built on first use; :class:`VenvError` naming pip's complaint when it cannot be built."""
    reqs = [_requirement(line) for line in requirements]
    seeds, rest = _seeds(reqs)
    root = root or cache_root()
    key = _key([str(r) for r in reqs], list(options), seeds)

    def build(venv: Path) -> None:
        _build(venv, seeds, rest, list(options))
        (venv / READY).write_text(json.dumps({"requirements": [str(r) for r in reqs], "options": list(options)}))

    return cached(root, key, build, complete=lambda path: (path / READY).is_file()).resolve()


def _requirement(line: str) -> Requirement:
    try:
        return Requirement(line)
    except InvalidRequirement as err:
        raise VenvError(f"{line!r} is not a pip requirement ({err})") from None


def _seeds(reqs: Sequence[Requirement]) -> tuple[dict[str, str], list[Requirement]]:
    """``{distribution: version}`` to copy from this installation (pip, and the seedable requirements its version
    meets, with their dependencies), and the requirements left for pip."""
    seeds: dict[str, str] = {}
    rest = []
    _closure("pip", None, seeds)
    for req in reqs:
        name = canonicalize_name(req.name)
        if name not in SEEDABLE or req.extras or req.url or not _closure(name, req, seeds):
            rest.append(req)
    return seeds, rest


def _closure(name: str, req: Requirement | None, seeds: dict[str, str]) -> bool:
    """Add ``name`` and what it needs to ``seeds`` when this installation has versions that fit; ``False`` (and
    ``seeds`` unchanged) when it does not."""
    found: dict[str, str] = {}
    todo: list[tuple[str, Requirement | None]] = [(name, req)]
    while todo:
        current, spec = todo.pop()
        key = canonicalize_name(current)
        if key in found or key in seeds:
            continue
        try:
            dist = importlib.metadata.distribution(key)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not dist.files or (spec is not None and not spec.specifier.contains(dist.version, prereleases=True)):
            return False  # no record of its files to copy, or another version than asked
        found[key] = dist.version
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or dep.marker.evaluate({"extra": ""}):
                todo.append((dep.name, dep))
    seeds.update(found)
    return True


def _key(reqs: list[str], options: list[str], seeds: dict[str, str]) -> str:
    python = base_python()
    blob = json.dumps([FORMAT, python, sys.version, reqs, options, sorted(seeds.items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _build(venv: Path, seeds: dict[str, str], rest: list[Requirement], options: list[str]) -> None:
    done = subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
    if done.returncode != 0:
        raise VenvError(f"python -m venv failed: {done.stderr.strip()[-400:]}")
    site = next((venv / "lib").glob("python*/site-packages"))
    for name in seeds:
        _copy_distribution(importlib.metadata.distribution(name), site, venv / "bin")
    # Byte-compiled now, as pip would have: the sandbox binds the virtualenv read-only, so an uncompiled module is
    # compiled again by every process (a test run's pytest start-up: 0.5 s instead of 0.25 s). Best effort: a file
    # that does not compile is imported from source as before.
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", str(site)], capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", VIRTUAL_ENV=str(venv))
    if "pip" not in seeds:  # this installation has no pip to copy: the interpreter's bundled one
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "ensurepip"], capture_output=True, text=True, env=env
        )
        if done.returncode != 0:
            raise VenvError(f"python -m ensurepip failed: {done.stderr.strip()[-400:]}")
    if not rest:
        return
    command = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *options, *map(str, rest)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise VenvError(f"pip install {' '.join(map(str, rest))} did not finish in {INSTALL_TIMEOUT:g} s") from None
    if done.returncode != 0:
        raise VenvError(f"pip install {' '.join(map(str, rest))} failed: {_pip_complaint(done.stderr)}")


def _pip_complaint(stderr: str) -> str:
    """The lines of pip's output that say what went wrong (its ERROR lines, else its last lines), on one line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return " ".join(errors or lines[-3:])[-600:] or "no output"


def _copy_distribution(dist: importlib.metadata.Distribution, site: Path, bin_dir: Path) -> None:
    """Copy an installed distribution's files under its site-packages into ``site`` and write its console
    scripts into ``bin_dir`` (bytecode and files installed elsewhere are left out)."""
    origin = Path(str(dist.locate_file(""))).resolve()
    for entry in dist.files or []:
        source = Path(str(dist.locate_file(entry))).resolve()
        if "__pycache__" in source.parts or not source.is_file() or not source.is_relative_to(origin):
            continue
        target = site / source.relative_to(origin)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for point in dist.entry_points.select(group="console_scripts"):
        module, _, attr = point.value.partition(":")
        if not attr:
            continue
        script = bin_dir / point.name
        script.write_text(
            f"#!{bin_dir / 'python'}\nimport sys\nfrom {module} import {attr.split('.')[0]}\nsys.exit({attr}())\n"
        )
        script.chmod(0o755)
