"""Where a bench script's result goes: ``bench/results/<name>.json``, its values beside how they were made.

Every file holds ``meta`` — the command, the date, the git commit (``-dirty`` when the tree had changes), the load
average at the start and the end, the CPU, its core count and the peak resident memory of the script and of its
largest waited-for child (Ray actors are not) — and the script's values at the top level, which the README and
the manual cite by key (``bench/figures.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
_START_LOAD = [round(x, 2) for x in os.getloadavg()]


def meta(argv: list[str] | None = None) -> dict[str, Any]:
    """How this result was made: command, date, commit, load, CPU, peak memory."""
    command = ["python", *(argv if argv is not None else sys.argv)]
    return {
        "command": shlex.join(command),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "load_at_start": _START_LOAD,
        "cpu": _cpu(),
        "cores": os.cpu_count(),
        "peak_rss_mb": {
            "self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
        },
    }


def write(name: str, values: Mapping[str, Any], *, argv: list[str] | None = None, folder: Path = RESULTS) -> Path:
    """Write ``values`` with their :func:`meta` to ``folder/<name>.json`` (whole or not at all: a temporary file
    renamed into place) and say where. A NaN is written as ``null`` (JSON has no NaN)."""
    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite({"meta": meta(argv), **values}), indent=2, default=float, allow_nan=False)
    part = path.with_name(f".{path.name}.part")
    part.write_text(text + "\n")
    os.replace(part, path)
    print(f"wrote {path}")
    return path


def options(parser: argparse.ArgumentParser, name: str | None) -> None:
    """Add ``--results DIR`` and ``--name NAME`` (the file's name without ``.json``; default ``name``) to ``parser``."""
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the results file")
    help_name = f"results file name, without .json (default: {name or 'see the description'})"
    parser.add_argument("--name", default=name, help=help_name)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
