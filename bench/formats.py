"""How often a model writes each family's action format: ``claw-eval`` per family, the share of turns the env could
carry out (a command ran, a tool call or an answer was read, a GUI action was performed) and of episodes with at
least one such turn (prints a table; not a test).

Each family runs ``--eval-n`` held-out tasks at its own budgets (generation, turns) and the model's evaluation
temperature (greedy for a real model), exactly as ``claw-eval --env F --model M`` would.

Writes ``bench/results/formats-<model>.json`` (``--name NAME`` for another name, e.g. ``formats-smollm2-warm``;
``--results DIR`` for another folder), again after each family so a stopped run keeps what it measured: ``model``,
``eval_n``, ``extra`` (the claw-eval options passed on) and per family ``<family>`` (``action_rate``,
``acting_episodes``, ``turns``, ``score``, ``success_rate``, ``seconds``, ``first_reply``, ``records``: the
episodes' file, in a temporary folder).

Run: ``.venv/bin/python bench/formats.py [--model smollm2] [--families ...] [--eval-n 8]`` (minutes per family with
smollm2 on 2 cores, SWE and GUI the longest: about 6 and 10 minutes at ``--eval-n 4``)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

FAMILIES = ("conversation", "toolcall", "terminal", "swe", "gui")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--eval-n", type=int, default=8)
    record.options(parser, None)
    parser.add_argument("extra", nargs="*", help="more claw-eval options (after --), e.g. --temperature 0.6")
    args = parser.parse_args()
    name = args.name or f"formats-{Path(args.model).name}"
    claw_eval = str(Path(sys.executable).parent / "claw-eval")
    rows = {}
    for family in args.families:
        out = Path(tempfile.mkdtemp(prefix=f"claw-formats-{family}-"))
        started = time.monotonic()
        proc = subprocess.run(
            [claw_eval, "--env", family, "--model", args.model, "--eval-n", str(args.eval_n), "--output-dir",
             str(out), *args.extra],
            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"{family}: claw-eval failed\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}", flush=True)
            continue
        summary = json.loads((out / "summary.json").read_text())
        records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        rows[family] = {
            "action_rate": summary["action_rate"],
            "acting_episodes": summary["acting_episodes"],
            "turns": sum(r["turns"] for r in records),
            "score": summary["score"],
            "success_rate": summary["success_rate"],
            "seconds": round(time.monotonic() - started),
            "first_reply": next((m["content"] for m in records[0]["messages"] if m["role"] == "assistant"), None),
            "records": str(out / "episodes.jsonl"),
        }
        r = rows[family]
        print(f"{family:>12}: actions carried out {r['action_rate']:.0%} of {r['turns']} turns, "
              f"{r['acting_episodes']:.0%} of episodes; success {r['success_rate']:.0%}; {r['seconds']} s",
              flush=True)  # fmt: skip
        # after each family: a stopped run keeps what it measured
        values = {"model": args.model, "eval_n": args.eval_n, "extra": args.extra, **rows}
        record.write(name, values, folder=args.results)


if __name__ == "__main__":
    main()
