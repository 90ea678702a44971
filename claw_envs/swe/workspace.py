"""Workspaces: the repository at ``base_commit`` at ``/testbed`` inside a sandbox, reset from cached parts.

What is cached (under the SWE cache, see :func:`~claw_envs.swe.repos.cache_root`):

* a bare **mirror** per repository (:class:`~claw_envs.swe.repos.RepoSource`), bound read-only into every sandbox
  at ``/claw/repo``;
* a **virtualenv** per (repo, ``environment_setup_commit``, ``install``) for rows with an ``install`` field,
  built once on the host and bound read-only at its own path (see :mod:`claw_envs.swe.tasks`).

Reset is one command in a new sandbox: a new repository that borrows the mirror's objects (no object is copied,
as with ``git clone --shared``) and a checkout of ``base_commit`` (measured against a fresh full clone in
``bench/envs.py``). A ``git worktree`` would need a writable mirror, and a hard-link copy cannot reach into the
sandbox's own size-capped tmpfs; a ``cp -a`` of a checked-out snapshot measured the same as a shared clone.
With the docker backend the instance's image already holds ``/testbed`` at ``base_commit`` (swebench's image
name, or the row's ``image``), so nothing is cloned.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure
from claw_envs.swe.repos import RepoSource, git, locked

TESTBED = "/testbed"
MIRROR_INSIDE = "/claw/repo"
INSTALL_TIMEOUT = 1800.0
READY = "ready"
GIT_SETUP = (
    "git config --global safe.directory '*' && git config --global user.email agent@example.invalid && "
    "git config --global user.name agent && git config --global advice.detachedHead false"
)


def swebench_image(instance_id: str) -> str:
    """swebench's image name for an instance (``sweb.eval.x86_64.<id with __ as _1776_>:latest``)."""
    return f"sweb.eval.x86_64.{instance_id.replace('__', '_1776_').lower()}:latest"


def checkout_command(base_commit: str) -> str:
    """Shell: a new repository at /testbed that borrows the mirror's objects (``objects/info/alternates``, as
    ``clone --shared`` sets up) with one branch, ``main``, at ``base_commit``, checked out: no remote, no tag, no
    other branch (not one ref per ref of the mirror to copy and then delete, which a real project's hundreds of
    tags would make slow)."""
    base = shlex.quote(base_commit)
    return (
        f"{GIT_SETUP} && git init -q -b main {TESTBED} && cd {TESTBED} && "
        f"echo {MIRROR_INSIDE}/objects > .git/objects/info/alternates && git checkout -q -b main {base}"
    )


def fresh_clone_command(base_commit: str) -> str:
    """Shell: a full, independent clone and checkout (every object copied): what reset is measured against."""
    return f"{GIT_SETUP} && git clone -q --no-local {MIRROR_INSIDE} {TESTBED} && git -C {TESTBED} checkout -q " + (
        shlex.quote(base_commit)
    )


@dataclass(frozen=True)
class Prepared:
    """What an instance's sandboxes need from the host: its mirror and (with ``install``) its virtualenv."""

    mirror: Path
    venv: Path | None = None

    def sandbox_options(self, kind: str, instance: Mapping[str, Any]) -> dict[str, Any]:
        """Constructor options of a sandbox for this instance (``local`` or ``docker``)."""
        if kind == "docker":
            image = instance.get("image") or swebench_image(str(instance["instance_id"]))
            return {"image": image, "workspace": TESTBED}
        binds: list[tuple[str, str]] = [(str(self.mirror), MIRROR_INSIDE)]
        if self.venv is not None:
            binds.append((str(self.venv), str(self.venv)))
        return {"workspace": TESTBED, "binds_ro": binds}

    def command_env(self, kind: str) -> dict[str, str]:
        """Environment of every command: the interpreter (and the virtualenv) on PATH, no bytecode files; with no
        virtualenv of its own, pytest does not load the plugins installed beside claw."""
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": TESTBED, "PIP_NO_INPUT": "1"}
        if kind == "local" and self.venv is None:
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # claw's own pytest plugins are not the repository's
        if kind == "local":
            paths = [str(self.venv / "bin")] if self.venv else []
            paths += [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
            env["PATH"] = ":".join(paths)
            if self.venv:
                env["VIRTUAL_ENV"] = str(self.venv)
        return env


class Workspaces:
    """Mirrors and virtualenvs for instances, from ``source`` (a :class:`RepoSource`)."""

    def __init__(self, source: RepoSource):
        self.source = source

    def prepare(self, instance: Mapping[str, Any], kind: str = "local") -> Prepared:
        """The cached parts of ``instance`` (made on first use; blocking: call it in a thread)."""
        if kind == "docker":
            return Prepared(mirror=Path(MIRROR_INSIDE))
        repo, base = str(instance["repo"]), str(instance["base_commit"])
        env_commit = str(instance.get("environment_setup_commit") or base)
        mirror = self.source.mirror(repo, base)
        if env_commit != base:
            self.source.mirror(repo, env_commit)
        install = instance.get("install")
        venv = self._venv(repo, env_commit, str(install), mirror) if install else None
        return Prepared(mirror, venv)

    def _venv(self, repo: str, commit: str, install: str, mirror: Path) -> Path:
        key = hashlib.sha256(f"{repo}\0{commit}\0{install}\0{sys.version}".encode()).hexdigest()[:16]
        root = self.source.root / "envs" / f"{repo.replace('/', '__')}-{key}"
        with locked(self.source.root / "locks" / f"env-{root.name}.lock"):
            if (root / READY).is_file():
                return root / "venv"
            shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
            root.mkdir(parents=True)
            try:
                _build_venv(root, install, mirror, commit)
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
            (root / READY).write_text(commit + "\n")
        return root / "venv"


def _build_venv(root: Path, install: str, mirror: Path, commit: str) -> None:
    """A virtualenv that also sees this interpreter's packages (pytest), then the row's ``install`` in a
    checkout at ``commit``; :class:`InfraFailure` with the log's tail when it fails."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    base = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (site / "_claw_base.pth").write_text("".join(f"{p}\n" for p in sorted(base)))
    src = root / "src"
    git("clone", "-q", "--shared", str(mirror), str(src))
    git("checkout", "-q", commit, cwd=src)
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PIP_NO_INPUT": "1",
    }
    log = root / "install.log"
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                ["bash", "-c", install], cwd=src, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            raise InfraFailure(f"the install did not finish within {INSTALL_TIMEOUT:g} s") from None
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip()[-800:]
        raise InfraFailure(f"the instance's install failed (exit {done.returncode}): {tail}")
