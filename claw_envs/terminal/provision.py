"""Provisioning a task folder on this machine: what its Dockerfile asks for, met here or named as missing.

* ``apt-get install`` packages are met by what this machine has: a package dpkg lists as installed (or one an
  installed package provides), or a program of that name in the system's ``bin`` folders (the sandbox shows them
  read-only). Python itself (``python3``, ``python3-pip``, ``python3.11-venv``…) is the task's virtualenv, and a
  ``python3-<name>`` library comes from pip as ``<name>``. Terminal-Bench's harness tools (``tmux``,
  ``asciinema``), ``software-properties-common`` and interactive editors (``nano``, ``vim``, ``less``…) are skipped
  when missing: the tests never run them.
* ``pip install`` requirements go into the task's **environment** virtualenv (:mod:`.venvs`), on ``PATH`` for the
  agent, the setup and the solution; with what the solution ``pip install``\\ s at run time (the sandbox has no
  network, so it is installed ahead). The **tests** get a second virtualenv: the same, plus what the test script
  installs and pytest (this installation's pytest, whatever version the script pins; reporting plugins such as
  ``pytest-json-ctrf`` are left out, their options are not passed).
* Links into a system ``bin`` folder are met by the task's environment (:mod:`.aliases`); files the Dockerfile copies
  outside the workdir are shown read-only at their paths (:mod:`.dockerfile`).
* What cannot be met — a missing package, a line only an image build can do, a workdir where the sandbox keeps its
  own folders — refuses the task with one line naming each missing thing (missing apt packages with the command
  that installs them, see :mod:`.system`); what is only approximated (a skipped line, a missing harness tool,
  another Python version, a link, a file shown read-only) is listed in ``approximations``: the oracle check reports
  such a task apart from a clean pass.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from claw_envs.sandbox.layout import checked_workspace
from claw_envs.terminal.aliases import alias_folder, resolve
from claw_envs.terminal.venvs import cache_root, ensure_venv

DPKG_STATUS = Path("/var/lib/dpkg/status")
BIN_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin")
HARNESS = {
    "tmux": "only Terminal-Bench's harness uses it (the local backend drives its own shell)",
    "asciinema": "only Terminal-Bench's harness uses it (it records the session)",
    "software-properties-common": "only add-apt-repository uses it",
    **dict.fromkeys(
        ("nano", "vim", "vim-tiny", "emacs", "emacs-nox", "less"),
        "an interactive editor or pager for the agent; tests do not run it",
    ),
}
REPORTING_PLUGINS = frozenset({"pytest-json-ctrf", "pytest-json-report"})
_PYTHON_APT = re.compile(
    r"^python(3(?:\.(\d+))?)?(?:-(?:pip|pip-whl|venv|dev|distutils|setuptools|wheel|full|minimal))?$"
)
_APT_TO_PIP = {
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "sklearn": "scikit-learn",
    "pil": "pillow",
    "opencv": "opencv-python",
    "serial": "pyserial",
}


@dataclass(frozen=True)
class Plan:
    """What this machine makes of a task folder: how each apt package is met, the two virtualenvs' requirements,
    what is only approximated, and (``problem``) the one line naming what it lacks (``None``: nothing)."""

    apt: dict[str, str]
    env_requirements: tuple[str, ...]
    test_requirements: tuple[str, ...]
    options: tuple[str, ...]
    approximations: tuple[str, ...]
    problem: str | None
    missing_apt: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    shown: tuple[tuple[str, str], ...] = ()

    def to_info(self) -> dict[str, Any]:
        """JSON-friendly, for ``info["environment"]``."""
        return {
            "apt": dict(self.apt),
            "pip": list(self.env_requirements),
            "test_pip": list(self.test_requirements),
            "approximations": list(self.approximations),
            "problem": self.problem,
            "missing_apt": list(self.missing_apt),
            "links": dict(self.links),
            "shown": [inside for _host, inside in self.shown],
        }


@dataclass(frozen=True)
class Environments:
    """The built virtualenvs of a task: the agent's (also the setup's and the solution's) and the tests'."""

    agent: Path
    tests: Path
    links: Path | None = None
    shown: tuple[tuple[str, str], ...] = ()

    def binds(self) -> list[tuple[str, str]]:
        """Both folders and the links' folder, read-only at their own paths (their scripts name their interpreter by
        path), and the files shown outside the workdir at theirs."""
        own = [p for p in dict.fromkeys((self.agent, self.tests, self.links)) if p is not None]
        return [*((str(p), str(p)) for p in own), *self.shown]

    def command_env(self, data_env: Mapping[str, str], *, tests: bool = False) -> dict[str, str]:
        """A command's environment: the virtualenv's ``bin`` first on ``PATH`` (then the links' folder), then the
        Dockerfile's ``ENV`` (``$PATH`` in it is this ``PATH``)."""
        venv = self.tests if tests else self.agent
        path = ":".join([str(venv / "bin"), *([str(self.links)] if self.links else []), *BIN_DIRS])
        env = {"PATH": path, "VIRTUAL_ENV": str(venv), "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        for key, value in data_env.items():
            env[key] = re.sub(r"\$\{?PATH\}?", lambda _m: path, value) if key == "PATH" else value
        return env

    def python(self, *, tests: bool = False) -> str:
        """The virtualenv's interpreter."""
        return str((self.tests if tests else self.agent) / "bin" / "python")


def plan(data: Mapping[str, Any]) -> Plan:
    """How this machine provisions the task folder ``data`` (fields of :func:`~.dockerfile.read_dockerfile` plus
    ``test_pip`` and ``solution_pip``); cheap (reads dpkg's status once per process)."""
    apt: dict[str, str] = {}
    missing, approximations = [], list(data.get("skipped", []))
    env_reqs = [_runner(r) for r in data.get("pip", [])]
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    for name in data.get("apt", []):
        python = _PYTHON_APT.match(name)
        if python:
            apt[name] = f"the task's virtualenv (Python {ours})"
            if python.group(2) and f"3.{python.group(2)}" != ours:
                approximations.append(f"{name}: Python 3.{python.group(2)} is asked; this machine's is {ours}")
        elif name.startswith("python3-"):
            pip_name = _APT_TO_PIP.get(name[8:], name[8:])
            apt[name] = f"pip {pip_name}, in the task's virtualenv"
            env_reqs.append(pip_name)
        elif met := host_package(name):
            apt[name] = met
        elif name in HARNESS:
            apt[name] = "skipped"
            approximations.append(f"apt {name}: not on this machine; {HARNESS[name]}")
        else:
            missing.append(name)
    at_run_time = [r for r in data.get("solution_pip", []) if _key(r) not in {_key(e) for e in env_reqs}]
    if at_run_time:
        env_reqs += at_run_time
        approximations.append(
            f"the solution installs {', '.join(at_run_time)} at run time; the sandbox has no network, so the task's "
            "virtualenv holds them from the start"
        )
    test_reqs = [*env_reqs, *(_runner(r) for r in data.get("test_pip", []) if _key(r) not in REPORTING_PLUGINS)]
    if "pytest" not in {_key(r) for r in test_reqs}:
        test_reqs.append("pytest")
    links = resolve(data.get("aliases", []))
    folder = Path(str(data.get("folder", ".")))
    copied = list(data.get("shown", []))
    shown = tuple((str(folder / src), dest) for src, dest in copied)
    approximations += [*links.notes, *(f"COPY {src} {dest}: shown read-only there" for src, dest in copied)]
    unsupported = [*_workdir_problem(data), *links.missing, *data.get("unsupported", [])]
    return Plan(
        apt,
        tuple(dict.fromkeys(env_reqs)),
        tuple(dict.fromkeys(test_reqs)),
        tuple(data.get("pip_options", [])),
        tuple(approximations),
        _problem(unsupported, missing),
        tuple(missing),
        links.links,
        shown,
    )


def build(p: Plan) -> Environments:
    """Build (or take from the cache) the plan's two virtualenvs and its links' folder; :class:`~.venvs.VenvError`
    when pip fails."""
    links = alias_folder(p.links, cache_root()) if p.links else None
    agent, tests = ensure_venv(p.env_requirements, p.options), ensure_venv(p.test_requirements, p.options)
    return Environments(agent, tests, links, p.shown)


def _workdir_problem(data: Mapping[str, Any]) -> list[str]:
    """Why the local sandbox cannot hold the task's workdir (``/home/user``, ``/root``, ``/tmp``…), if it cannot."""
    workdir = str(data.get("workdir", "/app"))
    try:
        checked_workspace(workdir)
    except ValueError:
        where = "this machine's system folders or the sandbox's own /home, /root, /tmp and /var"
        return [f"WORKDIR {workdir}: the local sandbox cannot hold a workdir there ({where})"]
    return []


def _problem(unsupported: Sequence[str], missing: Sequence[str]) -> str | None:
    """One line naming everything the task needs that this machine cannot give, or ``None``."""
    parts = []
    if missing:
        command = install_command(missing)
        parts.append(f"apt packages not installed here: {', '.join(missing)} (install: `{command}`)")
    parts += [line if line.startswith(("WORKDIR", "`")) else f"Dockerfile `{line}`" for line in unsupported[:3]]
    if len(unsupported) > 3:
        parts.append(f"and {len(unsupported) - 3} more Dockerfile lines")
    if not parts:
        return None
    return f"this machine lacks what the task needs: {'; '.join(parts)} (use sandbox='docker')"


def _runner(requirement: str) -> str:
    """``pytest`` whatever version is pinned (the test runner is this installation's); anything else as it is."""
    return "pytest" if _key(requirement) == "pytest" else requirement


def _key(requirement: str) -> str:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return requirement


def host_package(name: str) -> str | None:
    """How this machine has apt package ``name`` (dpkg says installed, an installed package provides it, or a
    program of that name is in a system ``bin`` folder), or ``None``."""
    installed, provided = _dpkg()
    if name in installed:
        return "installed (dpkg)"
    if name in provided:
        return f"provided by {provided[name]} (dpkg)"
    for folder in BIN_DIRS:
        if os.access(os.path.join(folder, name), os.X_OK):
            return f"{folder}/{name} is here"
    return None


def install_command(names: Sequence[str]) -> str:
    """The one command that installs the apt packages ``names``."""
    return "apt-get install -y --no-install-recommends " + " ".join(sorted(set(names)))


def forget_dpkg() -> None:
    """Read dpkg's status again at the next check (after an install)."""
    _dpkg.cache_clear()


@functools.cache
def _dpkg() -> tuple[frozenset[str], dict[str, str]]:
    """Installed package names and ``{virtual name: package}`` from dpkg's status file (empty without dpkg)."""
    try:
        text = DPKG_STATUS.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset(), {}
    installed, provided = set(), {}
    for block in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", block, re.M))
        if "install ok installed" not in fields.get("Status", "") or "Package" not in fields:
            continue
        package = fields["Package"]
        installed.add(package)
        for virtual in fields.get("Provides", "").split(","):
            virtual = virtual.split("(")[0].strip()
            if virtual:
                provided.setdefault(virtual, package)
    return frozenset(installed), provided
