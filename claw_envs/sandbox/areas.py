"""Where a sandbox's paths live on the host: its workspace, /tmp and home are folders under one root, and a path
never leads out of them (not through ``..``, not through a symlink)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping
from pathlib import Path


class Areas:
    """The host folders behind a sandbox's inside paths.

    ``mapping`` maps each inside folder (``/testbed``, ``/tmp``, ``/home/sandbox``; or host paths when there is
    no namespace) to its folder name under ``root``; relative paths are under ``workspace``.
    """

    def __init__(self, root: Path, mapping: Mapping[str, str], workspace: str):
        self.root = root
        self.mapping = dict(mapping)
        self.workspace = workspace

    def inside_path(self, path: str) -> str:
        """``path`` as an absolute, normalised path inside the sandbox (relative: under the workspace)."""
        path = os.fspath(path)
        if "\0" in path:
            raise ValueError("path contains a NUL byte")
        return posixpath.normpath(posixpath.join(self.workspace, path))

    def host_path(self, inside: str) -> Path:
        """Where an inside path lives on the host; only the workspace, /tmp and $HOME are mapped."""
        for area_inside, name in self.mapping.items():
            if inside == area_inside or inside.startswith(area_inside + "/"):
                return self.root / name / posixpath.relpath(inside, area_inside)
        raise ValueError(f"{inside!r} is outside the sandbox's workspace, /tmp and home directories")

    def area_of(self, host: Path) -> Path:
        """The area folder that holds ``host``."""
        for name in self.mapping.values():
            if host.is_relative_to(self.root / name):
                return self.root / name
        raise ValueError(f"{host} is outside the sandbox")

    def resolved(self, path: str) -> Path:
        """The host file behind ``path``, its symlinks followed, refused when they lead out of its area."""
        host = self.host_path(self.inside_path(path))
        area = self.area_of(host)
        resolved = host.resolve()
        if not resolved.is_relative_to(area.resolve()):
            raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
        return resolved

    def make_parents(self, path: str, host: Path, own: Callable[[Path], None]) -> None:
        """Create the folders above ``host`` (each handed to ``own``), never through a symlink out of its area."""
        area = self.area_of(host)
        folder = area
        for part in host.parent.relative_to(area).parts:
            folder = folder / part
            if not folder.resolve().is_relative_to(area.resolve()):
                raise ValueError(f"{path!r} leads outside the sandbox (through a symlink)")
            if not folder.is_dir():
                folder.mkdir()
                own(folder)
