"""Asynchronous vs synchronous pipeline: wall time of N updates with a judge that takes time to answer.

A local OpenAI-compatible judge server (started here, on 127.0.0.1) answers each request after an
injected delay and serves at most ``--judge-slots`` requests at once, like a model judge with finite
capacity. The same ``claw-train`` run — env, model, method, judge, updates — goes once through the four
overlapping loops and once with ``--sync`` (roll out, then judge, then train), each in its own process.
Prints both wall times (the pipeline's own, from ``summary.json``: start-up and imports excluded) and
``sync / async`` (how many times faster the asynchronous pipeline is).

Writes ``bench/results/pipeline.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``settings`` (the
options), ``runs.<async|sync>`` (``wall_s``, ``updates``, ``judge_requests``, ``trained``, ``stale_dropped``) and
``sync_over_async`` (the speed-up).

Run: ``.venv/bin/python bench/pipeline.py [--updates 4] [--delay 0.5] [--judge-slots 8] [--model tiny]`` (about
3 minutes at the defaults on 2 cores, start-ups included; ``--updates 1 --votes 1 --max-new-tokens 16`` for a smoke
run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import record

HINT = "[HINT_START]Write it in one or two casual sentences, with no bold, headers or step lists.[HINT_END]"
CLAW_TRAIN = str(Path(sys.executable).parent / "claw-train")


def judge_server(delay: float, slots: int) -> tuple[ThreadingHTTPServer, str, dict[str, int]]:
    """An OpenAI chat endpoint that takes ``delay`` seconds per request, ``slots`` at a time; -1 with a hint."""
    gate = threading.Semaphore(slots)
    served = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with gate:
                time.sleep(delay)
            served["requests"] += 1
            message = {"role": "assistant", "content": f"The user complained.\n{HINT}\n\\boxed{{-1}}"}
            choice = {"index": 0, "finish_reason": "stop", "message": message}
            body = json.dumps({"id": "b", "object": "chat.completion", "model": "judge", "choices": [choice]}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the run stopped with this request in flight and closed its connection

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"openai://127.0.0.1:{server.server_address[1]}", served


def one_run(args: argparse.Namespace, judge: str, *, sync: bool, out: Path) -> dict:
    config = out.parent / f"{out.name}.yaml"
    config.write_text(
        f"votes: {args.votes}\nmax_new_tokens: {args.max_new_tokens}\nreport_to: none\n"
        f"judge_options: {{timeout: {60 + 10 * args.delay}}}\n"
    )
    cmd = [
        CLAW_TRAIN, "--env", args.env, "--model", args.model, "--method", "combined", "--judge", judge,
        "--updates", str(args.updates), "--output-dir", str(out), "--eval-every", "0",
        "--checkpoint-every", str(args.updates), "--config", str(config), "--no-display",
    ]  # fmt: skip
    if sync:
        cmd.append("--sync")
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{'sync' if sync else 'async'} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="conversation")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds the judge takes per request")
    parser.add_argument("--judge-slots", type=int, default=8, help="requests the judge serves at once")
    parser.add_argument("--votes", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    record.options(parser, "pipeline")
    args = parser.parse_args()
    options = ("env", "model", "updates", "delay", "judge_slots", "votes", "max_new_tokens")
    settings = {k: getattr(args, k) for k in options}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.model == "tiny":  # build/bootstrap once, outside the timed runs
        from claw_train.policy.loader import resolve_model

        args.model = resolve_model("tiny", family=args.env, progress=True)
    server, judge, served = judge_server(args.delay, args.judge_slots)
    rows, runs = {}, {}
    try:
        with tempfile.TemporaryDirectory(prefix="claw-bench-") as tmp:
            for sync in (False, True):
                name = "sync" if sync else "async"
                before = served["requests"]
                summary = one_run(args, judge, sync=sync, out=Path(tmp) / name)
                trainer = summary["counters"].get("trainer", {})
                rows[name] = summary["wall_time"]
                runs[name] = {
                    "wall_s": summary["wall_time"],
                    "updates": summary["updates"],
                    "judge_requests": served["requests"] - before,
                    "trained": trainer.get("trained", 0),
                    "stale_dropped": trainer.get("stale_dropped", 0),
                }
                print(
                    f"{name:>5}: {summary['wall_time']:7.1f} s for {summary['updates']} updates   "
                    f"judge requests {served['requests'] - before}   trained {trainer.get('trained', 0)}   "
                    f"stale dropped {trainer.get('stale_dropped', 0)}",
                    flush=True,
                )
    finally:
        server.shutdown()
    print(
        f"env={args.env} judge: {args.delay:g} s/request, {args.judge_slots} at once, {args.votes} votes; "
        f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}\n"
        f"sync / async = {rows['sync'] / rows['async']:.2f}"
    )
    values = {"settings": settings, "runs": runs, "sync_over_async": rows["sync"] / rows["async"]}
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
