"""Links a Dockerfile makes into a system ``bin`` folder (``ln -s /usr/bin/python3 /usr/bin/python``), met by the
task's environment instead of written into this machine's ``/usr/bin``.

* ``python``/``pip`` names (``python``, ``python3``, ``pip``, ``pip3``, ``python3.X``) pointing at another Python or
  pip: the task's virtualenv has them all, first on ``PATH``.
* Any other link whose target this machine has in a folder the sandbox shows (``/usr``, ``/bin``, ``/sbin``): a link
  of that name in a bin folder of the sandbox's own (cached, read-only inside), on ``PATH`` after the virtualenv.
* A link to a program this machine lacks (``/opt/gradle/bin/gradle``) refuses the task, naming it.

Both met kinds are approximations (the name is on ``PATH``, not at the path the Dockerfile wrote), listed as such.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from claw_envs.cache import cached

_PYTHONISH = re.compile(r"^(python|pip)(3(\.\d+)?)?$")
VISIBLE = ("/usr/", "/bin/", "/sbin/")
"""Where a link's target must be for the sandbox to run it (the system folders it shows read-only)."""
READY = "claw-aliases.json"


@dataclass(frozen=True)
class Aliases:
    """What a task's links come to: ``links`` (name → target) for a bin folder of the sandbox's own, ``notes`` (the
    approximations) and ``missing`` (one line per link to a program this machine lacks)."""

    links: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


def resolve(aliases: Sequence[Sequence[str]]) -> Aliases:
    """How this machine meets ``[link, target, command]`` entries (see the module docstring)."""
    links, notes, missing = [], [], []
    for link, target, command in aliases:
        name = posixpath.basename(link)
        where = posixpath.dirname(link)
        ours, theirs = _PYTHONISH.match(name), _PYTHONISH.match(posixpath.basename(target))
        if ours and theirs and ours.group(1) == theirs.group(1):
            notes.append(f"`{command}`: `{name}` is the task virtualenv's {ours.group(1)} on PATH (no link in {where})")
            continue
        path = posixpath.normpath(posixpath.join(where, target))
        if path.startswith(VISIBLE) and os.access(path, os.X_OK):
            links.append((name, path))
            notes.append(f"`{command}`: `{name}` runs {path} from the sandbox's own bin folder on PATH, not {link}")
        else:
            missing.append(f"`{command}` links to {path}, which this machine lacks")
    return Aliases(tuple(links), tuple(notes), tuple(missing))


def alias_folder(links: Sequence[tuple[str, str]], root: Path) -> Path:
    """A cached folder holding a symlink per ``(name, target)`` (built once per set of links)."""
    key = "aliases-" + hashlib.sha256(json.dumps(sorted(links)).encode()).hexdigest()[:16]

    def build(folder: Path) -> None:
        for name, target in links:
            (folder / name).symlink_to(target)
        (folder / READY).write_text(json.dumps(sorted(links)))
        folder.chmod(0o755)

    return cached(root, key, build, complete=lambda path: (path / READY).is_file()).resolve()
