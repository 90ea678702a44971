"""Where repositories come from, and the cached bare mirror of each that every episode is reset from.

A :class:`RepoSource` finds ``owner/name`` in this order:

* the **built-in** repos (``claw-examples/*``), written by us and shipped as package data (one JSON file per repo,
  ``data/repos/<name>.json``: its files and its commit message), generated into a real git repository at runtime
  with a fixed author and date, so their commits have the same hashes everywhere;
* a **directory** (``repos=DIR``, ``--repos DIR``) of clones or bare mirrors named ``owner__name`` (the
  instance-id convention) or ``owner__name.git``, or git bundles named ``owner__name.bundle`` (``git bundle create``);
* a **git URL template** (``repos=https://mirror.example/{repo}.git``; ``{repo}``, ``{owner}`` and ``{name}`` are
  filled in), GitHub (``https://github.com/{repo}.git``) when no source is given.

Mirrors live under ``<cache>/mirrors/owner__name.git``; one is made once (under a file lock, built aside and
renamed into place, so a failure never leaves half a mirror) and fetched again only when an instance asks for a
commit it lacks. Sandboxes see it read-only, so no episode can corrupt it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path

from claw_envs.cache import locked
from claw_envs.core import InfraFailure

GITHUB = "https://github.com/{repo}.git"
GIT_TIMEOUT = 600.0
FIXED_IDENTITY = {
    "GIT_AUTHOR_NAME": "claw",
    "GIT_AUTHOR_EMAIL": "claw@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "claw",
    "GIT_COMMITTER_EMAIL": "claw@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


class RepoError(InfraFailure):
    """A repository or commit the source cannot provide (the environment's fault, never the agent's)."""


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The SWE cache: ``cache_dir``, else ``$CLAW_SWE_CACHE``, else ``$XDG_CACHE_HOME/claw/swe`` (``~/.cache``)."""
    if cache_dir is None:
        cache_dir = os.environ.get("CLAW_SWE_CACHE") or (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "claw" / "swe"
        )
    root = Path(cache_dir).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def dir_name(repo: str) -> str:
    """``owner/name`` -> ``owner__name`` (the instance-id convention)."""
    return repo.replace("/", "__")


def git(*args: str, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run git on the host; :class:`RepoError` with git's own message when it fails."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})},
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RepoError(f"git {args[0]} failed: {err}") from err
    if done.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed: {done.stderr.strip()[-600:]}")
    return done.stdout


@cache
def builtin_repos() -> dict[str, dict]:
    """``owner/name`` -> its package data (``description``, ``message``, ``files``) for every built-in repo."""
    folder = files("claw_envs.swe") / "data" / "repos"
    repos = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            repos[data["repo"]] = data
    return repos


def generate_builtin(repo: str, dest: Path) -> str:
    """Write the built-in ``repo`` as a git repository with one commit at ``dest``; returns the commit hash."""
    data = builtin_repos()[repo]
    dest.mkdir(parents=True)
    for rel, text in data["files"].items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git("init", "-q", "-b", "main", cwd=dest)
    git("add", "-A", cwd=dest)
    git("-c", "commit.gpgsign=false", "commit", "-q", "-m", data["message"], cwd=dest, env=FIXED_IDENTITY)
    return git("rev-parse", "HEAD", cwd=dest).strip()


class RepoSource:
    """Finds repositories (see the module docstring) and keeps their mirrors in ``<cache>/mirrors``.

    ``spec``: ``None`` (built-in repos, then GitHub), a directory, or a URL template.
    """

    def __init__(self, spec: str | os.PathLike[str] | None = None, cache_dir: str | os.PathLike[str] | None = None):
        self.spec = None if spec is None else str(spec)
        self.root = cache_root(cache_dir)
        if self.spec is not None and not self._is_template(self.spec) and not Path(self.spec).is_dir():
            raise ValueError(
                f"repos={self.spec!r} is neither a directory of owner__name clones nor a URL template with {{repo}}"
            )

    @staticmethod
    def _is_template(spec: str) -> bool:
        return any(key in spec for key in ("{repo}", "{owner}", "{name}"))

    def describe(self) -> str:
        """Where repositories come from, in words (for error messages)."""
        if self.spec is None:
            return f"the built-in repos, then {GITHUB}"
        return f"the URL template {self.spec}" if self._is_template(self.spec) else f"the directory {self.spec}"

    def origin(self, repo: str) -> str:
        """The path or URL ``repo`` is cloned from; :class:`RepoError` when the source does not hold it."""
        if "/" not in repo or repo.count("/") != 1:
            raise RepoError(f"repo {repo!r} is not 'owner/name'")
        owner, name = repo.split("/")
        if self.spec is None or self._is_template(self.spec):
            template = self.spec or GITHUB
            return template.format(repo=repo, owner=owner, name=name)
        for candidate in (Path(self.spec) / dir_name(repo), Path(self.spec) / f"{dir_name(repo)}.git"):
            if candidate.is_dir():
                return str(candidate.resolve())
        bundle = Path(self.spec) / f"{dir_name(repo)}.bundle"
        if bundle.is_file():
            return str(bundle.resolve())
        raise RepoError(
            f"repo {repo} is not in {self.describe()}: expected a clone or bare mirror named "
            f"{dir_name(repo)} or {dir_name(repo)}.git there, or a bundle {dir_name(repo)}.bundle"
        )

    def mirror(self, repo: str, commit: str | None = None) -> Path:
        """The bare mirror of ``repo`` in the cache, made or fetched so that it holds ``commit``."""
        path = self.root / "mirrors" / f"{dir_name(repo)}.git"
        with locked(self.root / "locks" / f"{dir_name(repo)}.lock"):
            if not (path / "HEAD").is_file():
                self._build(repo, path)
            if commit and not _has_commit(path, commit):
                if repo in builtin_repos():
                    raise RepoError(f"commit {commit} is not in the built-in repo {repo}")
                git("fetch", "-q", "--tags", self.origin(repo), "+refs/heads/*:refs/heads/*", cwd=path)
                if not _has_commit(path, commit):
                    raise RepoError(f"commit {commit} is not in {repo} (from {self.describe()})")
        return path

    def _build(self, repo: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(path, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
            target = Path(tmp) / "mirror.git"
            if repo in builtin_repos():
                generate_builtin(repo, Path(tmp) / "src")
                git("clone", "-q", "--bare", str(Path(tmp) / "src"), str(target))
            else:
                git("clone", "-q", "--bare", self.origin(repo), str(target))
            os.rename(target, path)


def _has_commit(mirror: Path, commit: str) -> bool:
    done = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=mirror, capture_output=True, timeout=GIT_TIMEOUT
    )
    return done.returncode == 0
