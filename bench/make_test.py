"""``make test`` as a measurement: the whole command timed, with its prebuild and pytest parts and its counts.

``--cold`` points claw's caches (the tiny and named models, the terminal and SWE virtualenvs) at empty folders first,
so the time includes building them, as on a fresh machine; without it the caches are used as they are.

Writes ``bench/results/make-test[-cold].json`` (``--name``, ``--results``): ``seconds`` (the whole command),
``prebuild_seconds`` and ``pytest_seconds`` (as the command printed them), ``passed``, ``skipped``, ``failed``,
``returncode`` and ``cold_cache``; the command's output goes to ``--log`` (default: a temporary file).

Run: ``.venv/bin/python bench/make_test.py [--cold]`` (about 20 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
CACHES = ("CLAW_TINY_CACHE", "CLAW_MODEL_CACHE", "CLAW_TERMINAL_VENVS", "CLAW_SWE_CACHE")
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+[^\n]*?) in (?P<seconds>[\d.]+)s", re.M)


def counts(output: str) -> dict[str, float]:
    """pytest's final counts (``passed``, ``skipped``, ``failed``…) and ``pytest_seconds``, and the prebuild's time."""
    out: dict[str, float] = {"passed": 0, "skipped": 0, "failed": 0, "errors": 0}
    if summary := list(SUMMARY.finditer(output)):
        last = summary[-1]
        out["pytest_seconds"] = float(last["seconds"])
        for number, what in re.findall(r"(\d+) (\w+)", last["counts"]):
            out["errors" if what == "error" else what] = int(number)
    if prebuild := re.search(r"prebuild: done in (\d+) s", output):
        out["prebuild_seconds"] = float(prebuild.group(1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty model caches: the fresh machine's time")
    parser.add_argument("--log", type=Path, help="where the command's output goes")
    record.options(parser, None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="claw-bench-make-test-") as tmp:
        env = dict(os.environ)
        if args.cold:
            env |= {name: f"{tmp}/{name.lower()}" for name in CACHES}
        log = args.log or Path(tmp) / "make-test.log"
        started = time.monotonic()
        with log.open("w") as sink:
            done = subprocess.run(["make", "test"], cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - started
        output = log.read_text(errors="replace")
    values = {"seconds": round(seconds, 1), "returncode": done.returncode, "cold_cache": args.cold, **counts(output)}
    print(values)
    record.write(args.name or f"make-test{'-cold' if args.cold else ''}", values, folder=args.results)


if __name__ == "__main__":
    main()
