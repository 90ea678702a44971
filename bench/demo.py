"""``make demo`` as a measurement: the Makefile's own ``claw-train`` command, timed, its held-out curve recorded.

The command is read from the Makefile's target (``demo`` or ``demo-real``), so what is measured is what a user
runs; only ``--output-dir`` is replaced by a folder of the bench's. ``--cold`` points the tiny model's cache at an
empty folder first, so the time includes building the model (the first run); without it the cache is used as
``make demo`` would use it.

Writes ``bench/results/<target>[-cold].json`` (``--name``, ``--results``): ``seconds`` (the whole command),
``evals`` (each evaluation as the run recorded it: update, score, valid, correct, accepted…), ``first`` / ``last``
(the first and the last evaluation), ``judge_positive_rate``, ``samples_trained``, the run's ``status``, and
``decisions``: per policy version, its turns accepted, masked by reason, and degenerate (cut off, repetitive);
``turns`` and ``cut_off`` sum them over the ``first4`` and the ``last4`` versions; ``replies``: per update, the
trained replies' mean length in tokens, repetition and behaviour NLL (the trainer's ``claw/`` metrics).
``--with`` appends options to the command (a setting measured on and off: ``--with "--degenerate drop"``).
``update_seconds``: each update's seconds as the run logged them, and their median. ``--workload MODEL`` times, in
the same run before the command, a fixed bare-transformers workload on ``MODEL`` (``model.generate`` of 8 × 96
sampled tokens at batch 8, then one LoRA forward + backward over 8 × 256 tokens) and writes ``workload_seconds`` and
``update_over_workload`` (the median update over it: a machine-independent speed of an update).

Run: ``.venv/bin/python bench/demo.py [--target demo|demo-real] [--cold] [--with OPTIONS]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import record

from claw_train.runlog.logs import read_logs

ROOT = Path(__file__).resolve().parents[1]


def makefile_command(target: str) -> list[str]:
    """The ``claw-train`` command of ``target``'s recipe in the Makefile, without its ``--output-dir``."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n\t(?P<recipe>[^\n]*)", text, re.M)
    if match is None:
        raise SystemExit(f"the Makefile has no target {target!r}")
    recipe = re.sub(r"\s--output-dir\s+(\S*\$\$\([^)]*\)\S*|\S+)", "", match["recipe"])
    return shlex.split(recipe.replace("$(VENV)/bin/", str(Path(sys.executable).parent) + "/"))


def decisions_by_version(logs: Path) -> dict[str, dict[str, int]]:
    """Per policy version: ``turns``, ``accepted``, ``masked:<reason>`` and ``degenerate:<kind>`` counts."""
    out: dict[str, Counter[str]] = {}
    for row in read_logs(logs):
        if row.get("kind") != "turn":
            continue
        counts = out.setdefault(str(row["version"]), Counter())
        counts["turns"] += 1
        counts["accepted" if row["decision"] == "accepted" else f"masked:{row['reason']}"] += 1
        if row.get("degenerate"):
            counts[f"degenerate:{row['degenerate']}"] += 1
    return {v: dict(c) for v, c in sorted(out.items(), key=lambda kv: int(kv[0]))}


def reply_metrics(logs: Path) -> dict[str, dict[str, float]]:
    """Per update: ``tokens``, ``repetition`` and ``nll`` of the trained replies, as the trainer logged them."""
    names = {"tokens": "claw/reply_tokens_mean", "repetition": "claw/repetition", "nll": "claw/behaviour_nll"}
    out: dict[int, dict[str, float]] = {}
    for row in read_logs(logs):
        if row.get("kind") == "metrics" and names["tokens"] in row.get("metrics", {}):
            out[int(row["update"])] = {k: round(float(row["metrics"][v]), 4) for k, v in names.items()}
    return {str(u): out[u] for u in sorted(out)}


def update_seconds(logs: Path) -> list[float]:
    """Each optimizer update's seconds, in update order, as the trainer logged them."""
    rows = [r for r in read_logs(logs) if r.get("kind") == "update" and "update_seconds" in r]
    return [r["update_seconds"] for r in sorted(rows, key=lambda r: r["update"])]


def workload(model: str) -> float:
    """Seconds of the fixed bare workload on ``model``: ``model.generate`` of 8 x 96 sampled tokens at batch 8, then
    one LoRA forward + backward over 8 x 256 tokens."""
    import real_model
    import torch

    from claw_train.policy.hf import from_pretrained_merged, load_tokenizer
    from claw_train.policy.loader import resolve_model

    path = Path(resolve_model(model, progress=True))
    tokenizer = load_tokenizer(str(path))
    batch = real_model.prompts(tokenizer, 8)
    plain = from_pretrained_merged(str(path)).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(map(len, batch))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in batch])[:, None]).long()
    lora = real_model.lora_model(path).train()
    rows = torch.randint(0, plain.config.vocab_size, (8, 256), generator=torch.Generator().manual_seed(0))
    started = time.monotonic()
    with torch.no_grad():
        plain.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.6, max_new_tokens=96,
                       min_new_tokens=96, pad_token_id=pad)  # fmt: skip
    lora(input_ids=rows, labels=rows).loss.backward()
    return time.monotonic() - started


def ends(decisions: dict[str, dict[str, int]], names: dict[str, str]) -> dict[str, dict[str, int]]:
    """Each named count summed over the first four and the last four versions (``first4``, ``last4``)."""
    versions = list(decisions.values())
    return {
        name: {"first4": sum(v.get(key, 0) for v in versions[:4]), "last4": sum(v.get(key, 0) for v in versions[-4:])}
        for name, key in names.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="demo", choices=["demo", "demo-real"])
    parser.add_argument("--cold", action="store_true", help="an empty tiny-model cache: the first run's time")
    parser.add_argument("--with", dest="extra", default="", help="options appended to the Makefile's command")
    parser.add_argument("--workload", metavar="MODEL", help="time the fixed bare workload on MODEL first (smollm2)")
    record.options(parser, None)
    args = parser.parse_args()
    argv = makefile_command(args.target) + shlex.split(args.extra)
    bare = workload(args.workload) if args.workload else None
    with tempfile.TemporaryDirectory(prefix="claw-bench-demo-") as tmp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if args.cold:
            env["CLAW_TINY_CACHE"] = str(Path(tmp) / "tiny-cache")
        out = Path(tmp) / "run"
        print("running:", shlex.join([*argv, "--output-dir", str(out)]), flush=True)
        started = time.monotonic()
        subprocess.run([*argv, "--output-dir", str(out), "--no-display"], env=env, check=True)
        seconds = time.monotonic() - started
        summary = json.loads((out / "summary.json").read_text())
        decisions = decisions_by_version(out / "logs")
        replies = reply_metrics(out / "logs")
        updates = update_seconds(out / "logs")
    evals = summary["evals"]
    values = {
        "target": args.target,
        "cold_cache": args.cold,
        "seconds": round(seconds, 1),
        "status": summary["status"],
        "evals": evals,
        "first": evals[0] if evals else None,
        "last": evals[-1] if evals else None,
        "judge_positive_rate": summary.get("judge_positive_rate"),
        "samples_trained": summary.get("samples_trained"),
        "options": args.extra,
        "decisions": decisions,
        "replies": replies,
        **ends(decisions, {"turns": "turns", "cut_off": "degenerate:cut_off"}),
        "update_seconds": {"each": updates, "median": statistics.median(updates) if updates else None},
    }
    if bare is not None and updates:
        values |= {"workload_seconds": round(bare, 2), "update_over_workload": statistics.median(updates) / bare}
    record.write(args.name or f"{args.target}{'-cold' if args.cold else ''}", values, folder=args.results)


if __name__ == "__main__":
    main()
