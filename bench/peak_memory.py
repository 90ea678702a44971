"""Peak memory of a real-model agent run: ``claw-train --env terminal --model smollm2`` on 16 easy shell tasks (one or
two commands each: make, copy, rename, count), the family's defaults otherwise, ``--updates 8`` — the run that was
killed by the out-of-memory killer at 24 GB after 3 updates before an update's rows were split by a token budget.

Writes ``bench/results/peak-memory-terminal-smollm2.json`` (``--results``, ``--name``): ``seconds``, ``status``,
``updates`` (done), ``peak_memory_mb`` (the run's summary: the largest resident set of claw-train and its
children), ``budget_mb`` (the issue's ceiling, 8 GB) and ``under_budget``. ``--with`` appends options.

Run: ``.venv/bin/python bench/peak_memory.py [--updates 8] [--with OPTIONS]`` (about ten minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

BUDGET_MB = 8 * 1024

# fmt: off
TASKS = [
    ("make-file", "Create a file named notes.txt.", "test -f notes.txt", {}, ["touch notes.txt"]),
    ("make-dir", "Create a directory named out.", "test -d out", {}, ["mkdir out"]),
    ("write-word", "Write the word hello into greeting.txt.", "grep -qx hello greeting.txt", {},
     ["echo hello > greeting.txt"]),
    ("copy", "Copy a.txt to b.txt.", "cmp -s a.txt b.txt", {"a.txt": "alpha\n"}, ["cp a.txt b.txt"]),
    ("rename", "Rename old.txt to new.txt.", "test -f new.txt && ! test -e old.txt", {"old.txt": "x\n"},
     ["mv old.txt new.txt"]),
    ("delete", "Delete the file junk.txt.", "! test -e junk.txt", {"junk.txt": "junk\n"}, ["rm junk.txt"]),
    ("count-lines", "Write the number of lines of data.txt into count.txt.", 'test "$(cat count.txt)" = 3',
     {"data.txt": "a\nb\nc\n"}, ["wc -l < data.txt > count.txt"]),
    ("first-line", "Write the first line of list.txt into first.txt.", 'test "$(cat first.txt)" = apple',
     {"list.txt": "apple\npear\nplum\n"}, ["head -n 1 list.txt > first.txt"]),
    ("sort", "Write the lines of words.txt, sorted, into sorted.txt.", 'test "$(tr "\\n" , < sorted.txt)" = a,b,c,',
     {"words.txt": "c\na\nb\n"}, ["sort words.txt > sorted.txt"]),
    ("upper", "Write the text of name.txt in upper case into upper.txt.", 'test "$(cat upper.txt)" = CLAW',
     {"name.txt": "claw\n"}, ["tr a-z A-Z < name.txt > upper.txt"]),
    ("append", "Append the line end to log.txt.", 'test "$(tail -n 1 log.txt)" = end', {"log.txt": "start\n"},
     ["echo end >> log.txt"]),
    ("nested", "Create the directory a/b/c.", "test -d a/b/c", {}, ["mkdir -p a/b/c"]),
    ("move-into", "Move report.txt into the directory docs.", "test -f docs/report.txt && ! test -e report.txt",
     {"report.txt": "r\n", "docs/.keep": ""}, ["mv report.txt docs/"]),
    ("executable", "Make run.sh executable.", "test -x run.sh", {"run.sh": "echo hi\n"}, ["chmod +x run.sh"]),
    ("grep", "Write the lines of app.log that contain ERROR into errors.txt.", 'test "$(wc -l < errors.txt)" = 2',
     {"app.log": "ok\nERROR one\nok\nERROR two\n"}, ["grep ERROR app.log > errors.txt"]),
    ("join", "Write the contents of x.txt then y.txt into both.txt.", 'test "$(tr "\\n" , < both.txt)" = x,y,',
     {"x.txt": "x\n", "y.txt": "y\n"}, ["cat x.txt y.txt > both.txt"]),
]
# fmt: on


def write_tasks(path: Path) -> None:
    """The 16 tasks as the terminal family's JSONL (instruction, check, files, solution)."""
    rows = [{"id": i, "instruction": q, "check": c, "files": f, "solution": s} for i, q, c, f, s in TASKS]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--with", dest="extra", default="", help="options appended to the claw-train command")
    record.options(parser, "peak-memory-terminal-smollm2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="claw-bench-memory-") as tmp:
        tasks, out = Path(tmp) / "easy.jsonl", Path(tmp) / "run"
        write_tasks(tasks)
        argv = [str(Path(sys.executable).parent / "claw-train"), "--env", "terminal", "--model", "smollm2",
                "--tasks", str(tasks), "--updates", str(args.updates), "--output-dir", str(out), "--no-display",
                *shlex.split(args.extra)]  # fmt: skip
        print("running:", shlex.join(argv), flush=True)
        started = time.monotonic()
        done = subprocess.run(argv, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
        seconds = time.monotonic() - started
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    peak = summary.get("peak_memory_mb")
    values = {
        "seconds": round(seconds, 1), "returncode": done.returncode, "status": summary.get("status"),
        "updates": summary.get("updates"), "peak_memory_mb": peak, "budget_mb": BUDGET_MB,
        "under_budget": peak is not None and peak <= BUDGET_MB, "options": args.extra,
    }  # fmt: skip
    print(f"peak resident memory {peak} MB (budget {BUDGET_MB} MB), {seconds:.0f} s, status {values['status']}")
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
