"""Files an instance's install generates in its checkout, carried into every workspace and grading checkout.

Most current Python projects generate files when they are installed: a ``_version.py`` written by setuptools-scm or
hatch-vcs, a compiled extension next to its source. git does not track them, so a fresh checkout at ``/testbed``
lacks them, and a package that imports one fails at collection. SWE-bench installs into the repository its tests
run in; claw builds an instance's environment once, in a checkout of its own (:mod:`.venvs`), so there it records
what the install left in that checkout and every reset copies it into ``/testbed``:

* **what is carried**: the files git does not track after the install, under a top-level directory that holds
  tracked files (``src/``, the package's own) or, at the top level, an importable module (``.py``, ``.so``); never build
  output or caches (``build/``, ``dist/``, ``*.egg-info``, ``__pycache__``, hidden directories), and always a file
  the project declares as generated (:func:`declared_files`);
* **where**: ``<env>/generated/files`` (the tree), ``<env>/generated/exclude`` (one ``/path`` line per file for
  ``/testbed/.git/info/exclude``), bound read-only into the sandbox at :data:`INSIDE`;
* **when**: copied before ``base_commit`` is checked out (:func:`restore_command`), so a file that ``base_commit``
  tracks wins over the generated one; left out of the agent's patch like the test files.

A file the project declares as generated that the install did not produce is an infrastructure failure naming it
(:func:`check_declared`), never the agent's loss. Files the install generates are those of
``environment_setup_commit``'s build: a patch that changes their source (a ``.c`` or ``.pyx`` file) is not rebuilt.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import tomllib
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure
from claw_envs.swe.repos import git

INSIDE = "/claw/generated"
FILES = "files"
EXCLUDE = "exclude"
SKIPPED_DIRS = frozenset({"build", "dist", "__pycache__", "node_modules", "htmlcov", "venv"})
SKIPPED_SUFFIXES = (".egg-info", ".dist-info", ".egg")
MODULE_SUFFIXES = tuple(s for s in importlib.machinery.all_suffixes() if s != ".pyc")


def declared_files(checkout: Path) -> dict[str, str]:
    """Files ``pyproject.toml`` says the build writes into the tree, each with the setting that says so: hatch-vcs's
    ``version-file`` (its build hook, in ``[tool.hatch.build]`` or a target) and setuptools-scm's ``version_file``
    or ``write_to``."""
    try:
        data = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    tool = _table(data, "tool")
    build = _table(_table(tool, "hatch"), "build")
    hooks = [("[tool.hatch.build.hooks.vcs]", _table(_table(build, "hooks"), "vcs"))]
    for name, target in _table(build, "targets").items():
        hooks.append((f"[tool.hatch.build.targets.{name}.hooks.vcs]", _table(_table(target, "hooks"), "vcs")))
    found = {str(hook["version-file"]): f"{where} version-file" for where, hook in hooks if hook.get("version-file")}
    scm = _table(tool, "setuptools_scm") or _table(tool, "setuptools-scm")
    for key in ("version_file", "write_to"):
        if scm.get(key):
            found.setdefault(str(scm[key]), f"[tool.setuptools_scm] {key}")
    return {_normal(path): where for path, where in found.items()}


def check_declared(checkout: Path, declared: dict[str, str], install: str | None) -> None:
    """:class:`InfraFailure` naming each declared file the install did not produce in ``checkout``."""
    missing = [f"{path} ({where})" for path, where in declared.items() if not (checkout / path).is_file()]
    if not missing:
        return
    how = (
        "the row's install did not write it: make it build the project too (pip install -e .)"
        if install
        else "the repository's own install (pip install --no-deps -e .) did not write it"
    )
    raise InfraFailure(
        f"the install did not generate {', '.join(missing)}, which pyproject.toml declares and the package's "
        f"imports may need; {how}"
    )


def carry(checkout: Path, dest: Path, declared: dict[str, str]) -> list[str]:
    """Copy what the install generated in ``checkout`` (see the module docstring) to ``dest``; the paths copied."""
    tops = {path.split("/", 1)[0] for path in git("ls-files", "-z", cwd=checkout).split("\0") if "/" in path}
    paths = []
    for path in sorted(p for p in git("ls-files", "-o", "-z", cwd=checkout).split("\0") if p):
        if path in declared or (not _skipped(path) and _in_source(path, tops)):
            paths.append(path)
    if not paths:
        return []
    for path in paths:
        target = dest / FILES / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(checkout / path, target, follow_symlinks=False)
    lines = ["# files the instance's install generated (claw)", *("/" + _escaped(p) for p in paths)]
    (dest / EXCLUDE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def restore_command(inside: str = INSIDE) -> str:
    """Shell, run in a new ``/testbed`` before its checkout: the generated files copied in and excluded from git."""
    copy = f"cp -R --preserve=mode {inside}/{FILES}/. ."
    return f"{copy} && mkdir -p .git/info && cat {inside}/{EXCLUDE} >> .git/info/exclude"


def _skipped(path: str) -> bool:
    parts = Path(path).parts
    return path.endswith(".pyc") or any(
        part.startswith(".") or part in SKIPPED_DIRS or part.endswith(SKIPPED_SUFFIXES) for part in parts
    )


def _in_source(path: str, tops: set[str]) -> bool:
    """Under a top-level directory that holds tracked files, or an importable module at the top level."""
    top, _, rest = path.partition("/")
    return top in tops if rest else path.endswith(MODULE_SUFFIXES)


def _table(data: Any, key: str) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _normal(path: str) -> str:
    return Path(path.replace("\\", "/")).as_posix().removeprefix("./")


def _escaped(path: str) -> str:
    """A path as a gitignore pattern (after a leading ``/``) that matches only itself."""
    return "".join("\\" + c if c in "*?[\\ " else c for c in path)
