"""System packages task folders need and this machine lacks: named with the one command that installs them, and
installed with apt only when asked (``claw-envs provision``, ``claw-envs check --provision``), as root.

Nothing here runs without being called: :func:`install_command` only says what to run; :func:`provision` runs
``apt-get install`` (found on ``PATH``) for the packages apt knows (``apt-cache show``), says which it does not know
(a name from another distribution, such as Ubuntu's ``openjdk-11-jdk``) and re-reads dpkg's status afterwards, so the
next plan sees what was installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from claw_envs.terminal import provision as _provision
from claw_envs.terminal.provision import install_command

APT_TIMEOUT = 1800.0
Runner = Callable[..., subprocess.CompletedProcess]


@dataclass
class Provisioned:
    """What :func:`provision` did: the packages asked for, those installed, those apt does not know, the command it
    ran (or would run) and why it could not (``error``)."""

    asked: list[str]
    installed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    command: str = ""
    error: str | None = None

    def to_info(self) -> dict[str, Any]:
        """JSON-friendly."""
        return dict(self.__dict__)

    def summary(self) -> str:
        """One line for a person."""
        if not self.asked:
            return "provisioning: nothing to install (every apt package the tasks name is here)"
        parts = [f"provisioning: {len(self.asked)} apt package(s) missing: {' '.join(self.asked)}"]
        if self.installed:
            parts.append(f"installed with `{self.command}`")
        if self.unknown:
            parts.append(f"apt here has no package named {', '.join(self.unknown)}")
        if self.error:
            parts.append(self.error)
        return "; ".join(parts)


def is_root() -> bool:
    """Whether this process may install system packages."""
    return os.geteuid() == 0


def missing_packages(datas: Iterable[dict[str, Any]]) -> list[str]:
    """The apt packages the task folders ``datas`` ask for that this machine lacks (each once, sorted)."""
    missing: set[str] = set()
    for data in datas:
        if "folder" in data:
            missing.update(_provision.plan(data).missing_apt)
    return sorted(missing)


def provision(names: Iterable[str], *, run: Runner = subprocess.run, as_root: bool | None = None) -> Provisioned:
    """Install ``names`` with ``apt-get install`` when this process is root; say why not otherwise."""
    asked = sorted(set(names))
    done = Provisioned(asked)
    if not asked:
        return done
    apt_get, apt_cache = shutil.which("apt-get"), shutil.which("apt-cache")
    done.command = install_command(asked)
    if apt_get is None or apt_cache is None:
        done.error = "this machine has no apt-get: install them with its own package manager"
        return done
    if not (is_root() if as_root is None else as_root):
        done.error = f"installing needs root: run `sudo {done.command}`"
        return done
    known = [n for n in asked if run([apt_cache, "show", n], capture_output=True, text=True).returncode == 0]
    done.unknown = [n for n in asked if n not in known]
    if not known:
        return done
    done.command = install_command(known)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = [apt_get, "install", "-y", "--no-install-recommends", *known]
    try:
        result = run(argv, capture_output=True, text=True, env=env, timeout=APT_TIMEOUT)
    except subprocess.TimeoutExpired:
        done.error = f"`{done.command}` did not finish in {APT_TIMEOUT:g} s"
        return done
    _provision.forget_dpkg()
    if result.returncode != 0:
        tail = " ".join((result.stderr or result.stdout or "").split())[-400:]
        done.error = f"`{done.command}` failed (exit {result.returncode}): {tail}"
    done.installed = [n for n in known if _provision.host_package(n) is not None]
    return done
