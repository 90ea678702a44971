"""Real Terminal-Bench task folders through the terminal family's oracle check (prints counts; not a test).

Every task folder under ``--tasks`` (default: the fetched ones in ``tests/fixtures/real_terminal``, see its
SOURCES.md) runs its oracle solution and a do-nothing agent on the local backend, as ``claw-envs check`` does; each
task is then one of: **pass** (solved, the environment as the Dockerfile asks), **approximate** (solved, with lines
the local backend skipped or substituted), **refused** (this machine lacks what the task needs; the line names it)
or **failed** (the oracle does not solve it here, or doing nothing does: see why, and read the task to tell a
task broken upstream from an environment that lacks something).

Writes ``bench/results/terminal-tasks.json`` (``--results DIR``, ``--name NAME`` to write elsewhere; ``--out FILE``
also writes the same values there): ``tasks_dir``, ``task_folders``, ``solved``, ``seconds``, ``counts``
(``pass``, ``approximate``, ``refused``, ``failed``) and ``tasks`` (``task``, ``verdict``, ``seconds``, ``why``, one
per task folder).

Run: ``.venv/bin/python bench/terminal_tasks.py [--tasks DIR] [--out FILE]`` (the first run builds the tasks'
virtualenvs from PyPI; they are cached; then a few minutes for the fixtures on 2 cores; a smoke run: ``--tasks``
a folder holding one task folder, e.g. a copy of ``evoeval/0``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import record

from claw_envs.check import TaskCheck, check_env
from claw_envs.terminal import TerminalEnv

FIXTURES = Path(__file__).parents[1] / "tests" / "fixtures" / "real_terminal"
REFUSED = ("this machine lacks", "cannot build the task's virtualenv")


def verdict(result: TaskCheck) -> str:
    """``pass``, ``approximate``, ``refused`` or ``failed``."""
    if result.problem is None:
        return "approximate" if result.approximate else "pass"
    if result.oracle.error and any(mark in result.oracle.error for mark in REFUSED):
        return "refused"
    return "failed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, default=FIXTURES, help="A folder of task folders (or datasets).")
    parser.add_argument("--out", type=Path, help="Also write the verdicts as JSON here.")
    record.options(parser, "terminal-tasks")
    args = parser.parse_args()
    env = TerminalEnv(tasks=str(args.tasks), split="test")
    started = time.monotonic()
    try:
        results = asyncio.run(check_env(env, [task.id for task in env.tasks]))
    finally:
        env.close()
    rows = [{"task": r.task_id, "verdict": verdict(r), "seconds": round(r.seconds, 1)} for r in results]
    for row, r in zip(rows, results, strict=True):
        row["why"] = r.problem or "; ".join(r.oracle.approximations)
        print(f"{row['verdict']:<12} {row['task']:<48} {row['seconds']:>6.1f}s  {row['why'][:160]}")
    kinds = ("pass", "approximate", "refused", "failed")
    counts = {kind: sum(row["verdict"] == kind for row in rows) for kind in kinds}
    solved = counts["pass"] + counts["approximate"]
    seconds = time.monotonic() - started
    print(
        f"\n{len(rows)} task folders in {seconds:.0f} s: {solved} solved by their oracle "
        f"({counts['pass']} pass, {counts['approximate']} approximate), {counts['refused']} refused, "
        f"{counts['failed']} failed"
    )
    tasks_dir = args.tasks.resolve()
    where = str(tasks_dir.relative_to(record.ROOT) if tasks_dir.is_relative_to(record.ROOT) else tasks_dir)
    values = {
        "tasks_dir": where,
        "task_folders": len(rows),
        "solved": solved,
        "seconds": seconds,
        "counts": counts,
        "tasks": rows,
    }
    record.write(args.name, values, folder=args.results)
    if args.out:
        args.out.write_text(json.dumps(values, indent=1) + "\n")


if __name__ == "__main__":
    main()
