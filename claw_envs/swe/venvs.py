"""Instance virtualenvs: the Python an instance's tests run with, which sees nothing of claw's own environment.

One is built per (repo, ``environment_setup_commit``, ``install``, the interpreter that builds it — its path and
version — and this module's own code), on the host, in a checkout at that commit:

* a row with ``install``: a virtualenv with its own pip, the ``install`` command run in the checkout with it active
  (``$VIRTUAL_ENV``, its ``bin`` first on ``PATH``, claw's own ``bin`` left out); pytest is added from the package
  index when the install brought none;
* a row without: the repository's declared test dependencies installed by pip from the package index — a
  ``[dependency-groups]`` or ``[project.optional-dependencies]`` entry named ``test``, ``tests`` or ``testing`` in
  its ``pyproject.toml``, else a requirements file such as ``requirements/tests.txt`` or ``test-requirements.txt``
  — with its ``[project] dependencies`` and pytest. pip reads its usual settings (``PIP_INDEX_URL``,
  ``PIP_FIND_LINKS``), so a local index works offline. When the project declares a file its build generates (a
  hatch-vcs or setuptools-scm version file), its own install (``pip install --no-deps -e .``) runs after them.

Either way the files the install generated in the checkout (a ``_version.py``, a compiled extension) are kept beside
the virtualenv and copied into every workspace (:mod:`.generated`); a declared one the install did not write is an
infrastructure failure.

Neither sees claw's packages (no system site packages, no path file), so pytest loads only the repository's own
plugins: a suite whose config sets ``filterwarnings = error`` is not broken by a plugin claw happens to have. A
``src/`` layout puts ``/testbed/src`` first on the tests' ``PYTHONPATH``.

A build happens under a file lock, in a folder of its own, and is published by renaming a symbolic link
(``<cache>/envs/<owner__name>-<key>``) onto it, so no process ever sees half an environment; one whose interpreter
is gone is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs.cache import cached
from claw_envs.core import InfraFailure
from claw_envs.swe import generated
from claw_envs.swe.repos import dir_name, git

INSTALL_TIMEOUT = 1800.0
BUILDER = hashlib.sha256(Path(__file__).read_bytes() + Path(generated.__file__).read_bytes()).hexdigest()[:12]
"""This module's code and :mod:`.generated`'s, in every key: a change to how environments are built rebuilds them."""
TEST_NAMES = ("test", "tests", "testing")
REQUIREMENT_FILES = (
    "requirements/test*.txt",
    "requirements-test*.txt",
    "requirements_test*.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "tests/requirements.txt",
)
RECORD = "env.json"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "PYTHONNOUSERSITE")


@dataclass(frozen=True)
class InstanceEnv:
    """A built environment: its virtualenv, the ``PYTHONPATH`` entries its tests need inside the sandbox, and the
    files its install generated in the checkout (:mod:`.generated`: their folder, or None when there are none)."""

    venv: Path
    pythonpath: tuple[str, ...]
    generated: Path | None = None
    generated_files: tuple[str, ...] = ()


@functools.cache
def interpreter_version(python: str) -> str:
    """``sys.version`` of ``python`` (this process's own when it is ``sys.executable``; asked once per process)."""
    if python == sys.executable:
        return sys.version
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=60
        )
    except OSError as err:
        raise InfraFailure(f"cannot run the interpreter {python}: {err}") from err
    if done.returncode != 0:
        raise InfraFailure(f"cannot run the interpreter {python}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def env_key(repo: str, commit: str, install: str | None, python: str, version: str) -> str:
    """The cache key of an environment: everything that changes what is built."""
    parts = (repo, commit, install or "", python, version, BUILDER)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def instance_env(
    root: Path, repo: str, commit: str, install: str | None, mirror: Path, python: str = sys.executable
) -> InstanceEnv:
    """The cached environment of ``repo`` at ``commit`` (built on first use; blocking)."""
    key = f"{dir_name(repo)}-{env_key(repo, commit, install, python, interpreter_version(python))}"

    def build(folder: Path) -> None:
        _build(folder, repo=repo, commit=commit, install=install, mirror=mirror, python=python)

    return _read(cached(root / "envs", key, build, complete=_usable))


def _usable(link: Path) -> bool:
    """A published environment whose record is there and whose interpreter is still where its link points."""
    return (link / RECORD).is_file() and (link / "venv" / "bin" / "python").exists()


def _read(link: Path) -> InstanceEnv:
    real = link.resolve()
    record = json.loads((real / RECORD).read_text(encoding="utf-8"))
    files = tuple(record.get("generated") or ())
    return InstanceEnv(real / "venv", tuple(record["pythonpath"]), real / "generated" if files else None, files)


def _build(dest: Path, *, repo: str, commit: str, install: str | None, mirror: Path, python: str) -> None:
    src = dest / "src"
    git("clone", "-q", "--shared", str(mirror), str(src))
    git("checkout", "-q", commit, cwd=src)
    venv = dest / "venv"
    log = dest / "install.log"
    python_in = str(venv / "bin" / "python")
    claw_pip = importlib.util.find_spec("pip") is not None  # pip from here installs into it (faster than ensurepip)
    _run([python, "-m", "venv", *(["--without-pip"] if claw_pip else []), str(venv)], cwd=dest, log=log, what="venv")
    pip = [sys.executable, "-m", "pip", "--python", python_in] if claw_pip else [python_in, "-m", "pip"]
    pip += ["install", "--disable-pip-version-check"]
    environ = _venv_environ(venv)
    declared = generated.declared_files(src)
    if install:
        if claw_pip:  # the install's own `pip install ...` needs a pip inside
            _run([*pip, "pip"], cwd=src, log=log, what="pip install of pip", env=environ)
        _run(["bash", "-c", install], cwd=src, log=log, what="the instance's install", env=environ)
        requirements: list[str] = [] if _has_module(venv, "pytest") else ["pytest"]
    else:
        requirements = declared_requirements(src)
    if requirements:
        _run([*pip, *requirements], cwd=src, log=log, what="pip install of the test dependencies", env=environ)
    if declared and not install:  # the files its build writes, as SWE-bench's own install of the repository makes
        what = "the repository's own install (pip install --no-deps -e .)"
        _run([*pip, "--no-deps", "-e", str(src)], cwd=src, log=log, what=what, env=environ)
    generated.check_declared(src, declared, install)
    carried = generated.carry(src, dest / "generated", declared)
    src_layout = (src / "src").is_dir() and any((src / "src").glob("*/__init__.py"))
    record = {
        "repo": repo,
        "commit": commit,
        "python": python,
        "install": install,
        "requirements": requirements,
        "pythonpath": ["/testbed/src", "/testbed"] if src_layout else ["/testbed"],
        "generated": carried,
        "builder": BUILDER,
    }
    (dest / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def declared_requirements(checkout: Path) -> list[str]:
    """pip arguments for what ``checkout`` declares its tests need (see the module docstring), pytest included."""
    data: dict[str, Any] = {}
    pyproject = checkout / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise InfraFailure(f"the repository's pyproject.toml cannot be read: {err}") from None
    project = data.get("project") or {}
    own = _canonical(str(project.get("name") or ""))
    extras = project.get("optional-dependencies") or {}
    groups = data.get("dependency-groups") or {}
    requirements = list(project.get("dependencies") or [])
    files: list[str] = []
    if name := next((n for n in TEST_NAMES if n in groups), None):
        requirements += _group(groups, name, set())
    elif name := next((n for n in TEST_NAMES if n in extras), None):
        requirements += _extra(extras, name, own, set())
    elif found := next((m for p in REQUIREMENT_FILES for m in sorted(checkout.glob(p)) if m.is_file()), None):
        files = ["-r", str(found)]
    requirements = [r for r in requirements if not own or _name(r) != own]  # the project itself is at /testbed
    if not any(_name(r) == "pytest" for r in requirements):
        requirements.append("pytest")
    return [*requirements, *files]


def _group(groups: dict[str, Any], name: str, seen: set[str]) -> list[str]:
    """A PEP 735 dependency group, its ``include-group`` entries expanded."""
    seen.add(name)
    out: list[str] = []
    for item in groups.get(name) or []:
        if isinstance(item, dict) and item.get("include-group") and item["include-group"] not in seen:
            out += _group(groups, str(item["include-group"]), seen)
        elif isinstance(item, str):
            out.append(item)
    return out


def _extra(extras: dict[str, Any], name: str, own: str, seen: set[str]) -> list[str]:
    """An optional-dependencies entry, references to the project's own extras (``pkg[other]``) expanded."""
    seen.add(name)
    out: list[str] = []
    for item in extras.get(name) or []:
        item = str(item)
        if own and _name(item) == own:
            inner = item.split("[", 1)[1].split("]", 1)[0] if "[" in item else ""
            for other in (e.strip() for e in inner.split(",")):
                if other and other not in seen:
                    out += _extra(extras, other, own, seen)
        else:
            out.append(item)
    return out


def _name(requirement: str) -> str:
    match = _NAME.match(requirement)
    return _canonical(match.group(1)) if match else ""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _venv_environ(venv: Path) -> dict[str, str]:
    """This process's environment with ``venv`` active and nothing of claw's Python in it."""
    own_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p and p != own_bin]
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(venv / "bin"), *path]), PIP_NO_INPUT="1")
    return env


def _has_module(venv: Path, module: str) -> bool:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {module}"], capture_output=True, env=_venv_environ(venv)
    )
    return done.returncode == 0


def _run(command: list[str], *, cwd: Path, log: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run one build step with its output appended to ``log``; :class:`InfraFailure` with the log's tail."""
    with log.open("ab") as out:
        try:
            done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=INSTALL_TIMEOUT)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise InfraFailure(f"{what} did not finish within {INSTALL_TIMEOUT:g} s") from None
        except OSError as err:
            raise InfraFailure(f"{what} could not start: {err}") from None
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip()[-800:]
        raise InfraFailure(f"{what} failed (exit {done.returncode}): {tail}")
