"""claw-serve learning a user's style from corrections, through the real ``openai`` client (prints figures; not a test).

A ``claw-serve`` process (``--model smollm2`` by default, the rules judge, its preset) and a scripted user in
``--sessions`` concurrent chat sessions. The user asks everyday questions; after each reply it checks three
preferences with the conversation rubric's own checks: no bold, no headers, short (at most 250 characters on at most
two lines, not cut off at the token limit). A reply that breaks one is corrected in the next message ("Please keep it
short, no bold and no headers.") followed by the next question; a reply that keeps all three is thanked. Those
follow-ups are the served turns' next states: claw-serve judges them and trains in the background.

Every time the served policy version changes (``X-Policy-Version``) the bench asks ``--probes`` held-out questions
as side turns (``X-Turn-Type: side``: served, never trained) at the trained turns' temperature and counts the
replies that keep all three preferences. It stops when that share reaches ``--target`` (80%) or after ``--updates``
versions, and prints: corrected turns until the target, the compliance of each version, and the latency of main
turns before the first update and while training (p50 / p95).

Writes ``bench/results/serve-correction.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``model``,
``sessions``, ``turns_per_session``, ``target``, ``updates``, ``max_seconds``, ``reached_at_version`` (null if
never) and ``corrected_at_target``, ``seconds`` (from the server up to the end), ``versions.<N>``
(``corrected_turns``, ``thanked_turns``, ``compliance``, ``example``, ``time_s``), ``latency.<before|training>``
(``p50``, ``p95`` in seconds, ``n``), ``latency_ratio`` (training / before: ``p50``, ``p95``; null unless both
were measured), ``run_dir`` and ``cpus``.

Run: ``.venv/bin/python bench/serve_correction.py [--model smollm2] [--updates 8]`` (10 minutes or more with
smollm2 on 2 cores; ``--max-seconds`` bounds it; ``--model tiny --sessions 2 --turns 1 --updates 1
--max-seconds 60`` for a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import record

from claw_envs.conversation.score import CHECKS, context

CORRECTION = "Please keep it short, no bold and no headers."
THANKS = "Thanks, that is how I like it."
QUESTIONS = [
    "How do I keep basil alive on a windowsill?",
    "What is a good way to remember people's names?",
    "Why does bread go stale?",
    "How long should I boil an egg for a runny yolk?",
    "What makes the sky blue?",
    "How do I get a stripped screw out?",
    "Is it better to stretch before or after running?",
    "How do noise-cancelling headphones work?",
    "What should I pack for a two-day hike?",
    "How can I make my coffee less bitter?",
    "Why do cats purr?",
    "How do I clean a cast iron pan?",
    "What is the difference between weather and climate?",
    "How do I start learning to juggle?",
    "Why do onions make you cry?",
    "How often should I water a cactus?",
    "What is compound interest?",
    "How do I fix a squeaky door?",
    "Why is the ocean salty?",
    "How do vaccines train the immune system?",
    "What is a haiku?",
    "How do I stop my glasses fogging up with a mask?",
    "Why do leaves change colour in autumn?",
    "How do I write a polite reminder email?",
    "What does a router do?",
    "How can I fall asleep faster?",
    "Why does ice float?",
    "How do I pick a ripe avocado?",
    "What is the tallest mountain in Europe?",
    "How do I get rid of fruit flies?",
    "Why do we have leap years?",
    "How should I store fresh herbs?",
]
PROBES = [
    "How do I make rice less sticky?",
    "Why do birds fly south for the winter?",
    "How can I keep a sourdough starter alive?",
    "What is the best way to learn touch typing?",
    "How do solar panels make electricity?",
    "How do I remove a coffee stain from a shirt?",
    "Why do we get hiccups?",
    "How do I sharpen a kitchen knife?",
]


def keeps_style(reply: str, finish_reason: str | None) -> bool:
    """No bold, no headers, short (the rubric's checks), and not cut off at the token limit."""
    ctx = context(reply, None)
    return finish_reason != "length" and all(CHECKS[name](ctx) for name in ("no_bold", "no_headers", "short"))


@dataclass
class Tally:
    """What the scripted user saw."""

    corrected: int = 0
    thanked: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"before": [], "training": []})
    versions: dict[int, dict[str, Any]] = field(default_factory=dict)
    version: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def ask(
    client: Any, messages: list[dict[str, str]], session: str, side: bool, temperature: float, max_tokens: int = 96
) -> Any:
    headers = {"X-Session-Id": session, **({"X-Turn-Type": "side"} if side else {})}
    return await client.chat.completions.with_raw_response.create(
        model="claw", messages=messages, max_tokens=max_tokens, temperature=temperature, extra_headers=headers
    )


async def probe(client: Any, tally: Tally, version: int, temperature: float, n: int) -> None:
    """Ask the held-out questions as side turns and record the share of replies that keep the style."""
    replies = await asyncio.gather(
        *(ask(client, [{"role": "user", "content": q}], f"probe-{version}-{i}", True, temperature)
          for i, q in enumerate(PROBES[:n]))
    )  # fmt: skip
    choices = [r.parse().choices[0] for r in replies]
    kept = [keeps_style(c.message.content or "", c.finish_reason) for c in choices]
    tally.versions[version] = {
        "corrected_turns": tally.corrected,
        "thanked_turns": tally.thanked,
        "compliance": sum(kept) / len(kept),
        "example": choices[0].message.content,
        "time_s": round(time.monotonic() - START, 1),
    }
    print(f"[{time.monotonic() - START:6.0f} s] policy v{version}: {sum(kept)}/{len(kept)} held-out replies keep the "
          f"style; corrected turns so far {tally.corrected}, thanked {tally.thanked}", flush=True)  # fmt: skip


async def user(client: Any, tally: Tally, index: int, temperature: float, turns: int) -> None:
    """One scripted user: sessions of ``turns`` questions, reacting to each reply, until the bench is done."""
    n = 0
    while not tally.done.is_set():
        session = f"user{index}-s{n}"
        messages: list[dict[str, str]] = []
        reaction = ""
        for t in range(turns + 1):
            question = QUESTIONS[(index * 7 + n * turns + t) % len(QUESTIONS)]
            content = f"{reaction} {question}".strip() if t < turns else reaction
            messages.append({"role": "user", "content": content})
            started = time.monotonic()
            # the last message only carries the reaction to the last reply (its own reply is not read)
            raw = await ask(client, messages, session, False, temperature, 96 if t < turns else 1)
            if t < turns:
                tally.latencies["before" if tally.version == 0 else "training"].append(time.monotonic() - started)
            choice = raw.parse().choices[0]
            version = int(raw.headers.get("x-policy-version", "0"))
            if version > tally.version:
                tally.version = version
                await probe(client, tally, version, temperature, len(PROBES))
            if t == turns or tally.done.is_set():
                break
            reply = choice.message.content or ""
            messages.append({"role": "assistant", "content": reply})
            if keeps_style(reply, choice.finish_reason):
                tally.thanked += 1
                reaction = THANKS
            else:
                tally.corrected += 1
                reaction = CORRECTION
        n += 1


async def drive(url: str, args: argparse.Namespace, temperature: float) -> Tally:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
    tally = Tally()
    await probe(client, tally, 0, temperature, len(PROBES))

    async def watch() -> None:
        while not tally.done.is_set():
            reached = [v for v, r in tally.versions.items() if r["compliance"] >= args.target]
            if reached or tally.version >= args.updates or time.monotonic() - START > args.max_seconds:
                tally.done.set()
            await asyncio.sleep(1)

    await asyncio.gather(watch(), *(user(client, tally, i, temperature, args.turns) for i in range(args.sessions)))
    return tally


START = time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--sessions", type=int, default=8, help="users chatting at once")
    parser.add_argument("--turns", type=int, default=3, help="questions per session")
    parser.add_argument("--updates", type=int, default=8, help="stop after this many policy versions")
    parser.add_argument("--target", type=float, default=0.8, help="share of held-out replies that keep the style")
    parser.add_argument("--max-seconds", type=float, default=3600)
    record.options(parser, "serve-correction")
    parser.add_argument("extra", nargs="*", help="more claw-serve options (after --)")
    args = parser.parse_args()
    from claw_train.models.presets import preset

    temperature = preset(args.model).temperature
    port = free_port()
    run_dir = Path(tempfile.mkdtemp(prefix="claw-serve-bench-"))
    cmd = [
        str(Path(sys.executable).parent / "claw-serve"), "--model", args.model, "--port", str(port),
        "--output-dir", str(run_dir), "--session-timeout", "30", "--report-to", "none", *args.extra,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log = (run_dir / "serve.log").open("w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import httpx

        while True:
            if server.poll() is not None:
                raise SystemExit(f"claw-serve stopped: see {run_dir / 'serve.log'}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        print(f"claw-serve --model {args.model} on {url} (run folder {run_dir}); {args.sessions} users", flush=True)
        global START
        START = time.monotonic()
        tally = asyncio.run(drive(url, args, temperature))
        seconds = time.monotonic() - START
    finally:
        server.terminate()
        server.wait(120)
    report(tally, args, run_dir, seconds)


def report(tally: Tally, args: argparse.Namespace, run_dir: Path, seconds: float) -> None:
    reached = next((v for v in sorted(tally.versions) if tally.versions[v]["compliance"] >= args.target), None)
    print(f"\n{'version':>8} {'corrected':>10} {'thanked':>8} {'compliance':>11} {'time':>8}")
    for v in sorted(tally.versions):
        r = tally.versions[v]
        print(f"{v:>8} {r['corrected_turns']:>10} {r['thanked_turns']:>8} {r['compliance']:>11.0%} {r['time_s']:>7}s")
    lat = {}
    for phase, values in tally.latencies.items():
        if values:
            q = statistics.quantiles(values, n=20) if len(values) > 1 else values * 19
            lat[phase] = {"p50": statistics.median(values), "p95": q[18], "n": len(values)}
            print(f"main-turn latency {phase}: p50 {lat[phase]['p50']:.1f} s, p95 {lat[phase]['p95']:.1f} s "
                  f"({len(values)} requests)")  # fmt: skip
    if reached is None:
        print(f"target not reached: no version had {args.target:.0%} of held-out replies keeping the style")
    else:
        print(f"target reached at v{reached}: {tally.versions[reached]['corrected_turns']} corrected turns")
    both = "before" in lat and "training" in lat
    ratio = {q: lat["training"][q] / lat["before"][q] for q in ("p50", "p95")} if both else None
    if ratio:
        print(f"main-turn latency while training / before: p50 {ratio['p50']:.1f}x, p95 {ratio['p95']:.1f}x")
    record.write(args.name, {
        "model": args.model, "sessions": args.sessions, "turns_per_session": args.turns, "target": args.target,
        "updates": args.updates, "max_seconds": args.max_seconds, "reached_at_version": reached,
        "corrected_at_target": None if reached is None else tally.versions[reached]["corrected_turns"],
        "seconds": seconds, "versions": {str(v): r for v, r in sorted(tally.versions.items())}, "latency": lat,
        "latency_ratio": ratio, "run_dir": str(run_dir), "cpus": os.cpu_count(),
    }, folder=args.results)  # fmt: skip


if __name__ == "__main__":
    main()
