"""Digests of generated data, remembered by the code that generates it.

A cached model is keyed on the digest of the data it was trained on (the tiny model's tokenizer corpus, a family's
demonstrations), so a build is redone exactly when the data changes. Generating the data only to hash it costs
seconds in every process that asks for the model (24,000 conversation demonstrations: ~12 s on one core), so the
digest is remembered under a fingerprint of what makes the data: the source and data files of the packages that
generate it, the arguments, and the Python version. A changed file means one regeneration; if the data came out
the same, the cached model is still found.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MEMO_DIR = "digests"
"""The folder, under a model cache root, that holds the remembered digests (one small JSON file each)."""


def package_files(module: str) -> list[Path]:
    """The files of ``module``'s top-level package (every file under it, compiled caches left out), or the module's
    own file when it is not in a package; empty when it cannot be found."""
    spec = importlib.util.find_spec(module.partition(".")[0])
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return sorted(
            path
            for folder in spec.submodule_search_locations
            for path in Path(folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        )
    return [Path(spec.origin)] if spec.origin else []


def demonstration_makers(env_id: str) -> list[Path]:
    """The files whose change may change ``env_id``'s demonstrations: the package of its entry point (a
    ``"module:Class"`` string, or the class or function itself) and claw_envs'."""
    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    module = str(entry).partition(":")[0] if isinstance(entry, str) else entry.__module__
    return [*package_files(module), *package_files("claw_envs")]


def fingerprint(files: Iterable[Path], **args: Any) -> str:
    """A digest of ``files`` (names and bytes), ``args`` and the Python version."""
    h = hashlib.sha256(json.dumps({"args": args, "python": sys.version_info[:2]}, sort_keys=True, default=str).encode())
    for path in sorted(set(files)):
        h.update(str(path).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:24]


def remembered(root: Path, key: str, compute: Callable[[], str]) -> str:
    """The digest remembered under ``root`` for the fingerprint ``key``, else ``compute()``'s, remembered for next
    time (written whole or not at all; an unreadable record is recomputed)."""
    record = root / MEMO_DIR / f"{key}.json"
    try:
        return str(json.loads(record.read_text(encoding="utf-8"))["digest"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = compute()
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f"{record.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"digest": digest}), encoding="utf-8")
        tmp.replace(record)
    except OSError:  # a read-only or full cache: the digest is still right, just not remembered
        pass
    return digest
