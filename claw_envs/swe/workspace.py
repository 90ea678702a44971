"""Workspaces: the repository at ``base_commit`` at ``/testbed`` inside a sandbox, reset from cached parts.

What is cached (under the SWE cache, see :func:`~claw_envs.swe.repos.cache_root`):

* a bare **mirror** per repository (:class:`~claw_envs.swe.repos.RepoSource`), bound read-only into every sandbox
  at ``/claw/repo``;
* a **virtualenv** per (repo, ``environment_setup_commit``, ``install``, interpreter) that sees nothing of claw's
  own environment, built once on the host and bound read-only at its own path (:mod:`claw_envs.swe.venvs`).
* the **files its install generated** in the build's checkout (a ``_version.py``, a compiled extension), bound
  read-only at ``/claw/generated`` and copied into ``/testbed`` before the checkout (:mod:`claw_envs.swe.generated`).

Reset is one command in a new sandbox: a new repository that borrows the mirror's objects (no object is copied,
as with ``git clone --shared``; a shallow mirror's boundary is copied too), the generated files, and a checkout of
``base_commit`` (measured against a fresh full clone in
``bench/envs.py``). A ``git worktree`` would need a writable mirror, and a hard-link copy cannot reach into the
sandbox's own size-capped tmpfs; a ``cp -a`` of a checked-out snapshot measured the same as a shared clone.
With the docker backend the instance's image already holds ``/testbed`` at ``base_commit`` (swebench's image
name, or the row's ``image``), so nothing is cloned.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs.swe import generated as gen
from claw_envs.swe.repos import RepoSource
from claw_envs.swe.venvs import instance_env

TESTBED = "/testbed"
MIRROR_INSIDE = "/claw/repo"
GIT_SETUP = (
    "git config --global safe.directory '*' && git config --global user.email agent@example.invalid && "
    "git config --global user.name agent && git config --global advice.detachedHead false"
)


def swebench_image(instance_id: str) -> str:
    """swebench's image name for an instance (``sweb.eval.x86_64.<id with __ as _1776_>:latest``)."""
    return f"sweb.eval.x86_64.{instance_id.replace('__', '_1776_').lower()}:latest"


def checkout_command(base_commit: str, generated: bool = False) -> str:
    """Shell: a new repository at /testbed that borrows the mirror's objects (``objects/info/alternates``, as
    ``clone --shared`` sets up; a shallow mirror's ``shallow`` file copied, so ``git log`` stops at its boundary)
    with one branch, ``main``, at ``base_commit``, checked out: no remote, no tag, no other branch (not one ref per
    ref of the mirror to copy and then delete, which a real project's hundreds of tags would make slow). With
    ``generated``, the install's generated files are copied in first; the forced checkout puts a file that
    ``base_commit`` tracks over one of them."""
    base = shlex.quote(base_commit)
    restore = f"{gen.restore_command()} && " if generated else ""
    return (
        f"{GIT_SETUP} && git init -q -b main {TESTBED} && cd {TESTBED} && "
        f"echo {MIRROR_INSIDE}/objects > .git/objects/info/alternates && "
        f"{{ [ ! -f {MIRROR_INSIDE}/shallow ] || cp {MIRROR_INSIDE}/shallow .git/shallow; }} && "
        f"{restore}git checkout -q -f -b main {base}"
    )


def fresh_clone_command(base_commit: str) -> str:
    """Shell: a full, independent clone and checkout (every object copied): what reset is measured against."""
    return f"{GIT_SETUP} && git clone -q --no-local {MIRROR_INSIDE} {TESTBED} && git -C {TESTBED} checkout -q " + (
        shlex.quote(base_commit)
    )


@dataclass(frozen=True)
class Prepared:
    """What an instance's sandboxes need from the host: its mirror and (local backend) its virtualenv."""

    mirror: Path
    venv: Path | None = None
    pythonpath: tuple[str, ...] = (TESTBED,)
    generated: Path | None = None
    generated_files: tuple[str, ...] = ()

    def checkout(self, base_commit: str) -> str:
        """Shell: the reset of ``/testbed`` at ``base_commit`` for this instance (:func:`checkout_command`)."""
        return checkout_command(base_commit, generated=self.generated is not None)

    def sandbox_options(self, kind: str, instance: Mapping[str, Any]) -> dict[str, Any]:
        """Constructor options of a sandbox for this instance (``local`` or ``docker``)."""
        if kind == "docker":
            image = instance.get("image") or swebench_image(str(instance["instance_id"]))
            return {"image": image, "workspace": TESTBED}
        binds: list[tuple[str, str]] = [(str(self.mirror), MIRROR_INSIDE)]
        if self.venv is not None:
            binds.append((str(self.venv), str(self.venv)))
        if self.generated is not None:
            binds.append((str(self.generated), gen.INSIDE))
        return {"workspace": TESTBED, "binds_ro": binds}

    def command_env(self, kind: str) -> dict[str, str]:
        """Environment of every command: the instance's virtualenv first on PATH (claw's own interpreter is not on
        it), the repository first on ``PYTHONPATH``, no bytecode files."""
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ":".join(self.pythonpath), "PIP_NO_INPUT": "1"}
        if kind == "local":
            paths = [str(self.venv / "bin")] if self.venv else []
            env["PATH"] = ":".join([*paths, "/usr/local/bin", "/usr/bin", "/bin"])
            if self.venv:
                env["VIRTUAL_ENV"] = str(self.venv)
        return env


class Workspaces:
    """Mirrors and virtualenvs for instances, from ``source`` (a :class:`RepoSource`); ``python`` is the interpreter
    the virtualenvs are built with (this one by default)."""

    def __init__(self, source: RepoSource, python: str = sys.executable):
        self.source = source
        self.python = python

    def prepare(self, instance: Mapping[str, Any], kind: str = "local") -> Prepared:
        """The cached parts of ``instance`` (made on first use; blocking: call it in a thread)."""
        if kind == "docker":
            return Prepared(mirror=Path(MIRROR_INSIDE))
        repo, base = str(instance["repo"]), str(instance["base_commit"])
        env_commit = str(instance.get("environment_setup_commit") or base)
        mirror = self.source.mirror(repo, base)
        if env_commit != base:
            self.source.mirror(repo, env_commit)
        install = str(instance["install"]) if instance.get("install") else None
        built = instance_env(self.source.root, repo, env_commit, install, mirror, self.python)
        return Prepared(mirror, built.venv, built.pythonpath, built.generated, built.generated_files)
