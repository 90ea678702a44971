"""Serving latency of the inprocess backend while weights are published (prints ratios; not a test).

Three phases with the same request load (``--clients`` concurrent clients, ``--requests`` requests each):

* ``idle``: no training — the baseline.
* ``publish``: a thread publishes a new state dict every ``--publish-ms`` ms (swap cost alone).
* ``train``: a thread runs a trainer-sized step (forward/backward/AdamW on ``--train-batch`` sequences of
  ``--train-len`` tokens, like one 16-sample update) on its own copy of the model and publishes after each.

For each phase it prints p50/p99 request latency, the ratio to ``idle``, the versions the completions
carried, and the failed-request count (must be 0). On a 2-core CPU the ``train`` ratio mostly measures
the cores the trainer takes; ``publish`` shows what the weight swap itself costs serving.

Writes ``bench/results/serving.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``settings`` (the
options), ``phases.<idle|publish|train>`` (``p50_ms``, ``p99_ms``, ``p50_ratio`` and ``p99_ratio`` to ``idle``,
``mean_ms``, ``requests``, ``failed``, ``publishes``, ``ms_per_publish`` (null without publishes), ``train_steps``,
``versions_seen``), ``failed`` (all phases) and ``idle_mean_ms``.

Run: ``.venv/bin/python bench/serving.py [--model PATH] [--requests N] [--clients C]`` (a few minutes at the
defaults on 2 cores; ``--clients 2 --requests 2`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    versions: set[int] = field(default_factory=set)
    failures: int = 0
    publishes: int = 0
    train_steps: int = 0
    publish_seconds: list[float] = field(default_factory=list)

    def pct(self, q: float) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, round(q * (len(data) - 1)))]


async def _load(policy, phase: Phase, clients: int, requests: int, max_new_tokens: int) -> None:
    from claw_train.policy import SamplingParams

    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0)

    async def client(c: int) -> None:
        for r in range(requests):
            prompt = [{"role": "user", "content": f"Question {c}.{r}: what is {c} + {r}?"}]
            start = time.perf_counter()
            try:
                comp = await policy.generate(prompt, sampling)
            except Exception:
                phase.failures += 1
                continue
            phase.latencies.append(time.perf_counter() - start)
            phase.versions.add(comp.policy_version)

    await asyncio.gather(*[client(c) for c in range(clients)])


def _publisher(
    policy, phase: Phase, stop: threading.Event, every_s: float, start_version: int, args_threads: int
) -> None:
    import torch

    torch.set_num_threads(args_threads)
    base = {k: v.clone() for k, v in policy._active.state_dict().items()}
    variants = [{k: v + 1e-3 * torch.randn_like(v) for k, v in base.items()} for _ in range(2)]
    version = start_version
    while not stop.wait(every_s):
        version += 1
        start = time.perf_counter()
        policy.publish(variants[version % 2], version)
        phase.publish_seconds.append(time.perf_counter() - start)
        phase.publishes += 1


def _trainer(policy, model_path: str, phase: Phase, stop: threading.Event, args, start_version: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.trainer_threads)  # per thread; the serving worker keeps its own
    model = AutoModelForCausalLM.from_pretrained(model_path).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    version = start_version
    while not stop.is_set():
        ids = torch.randint(0, vocab, (args.train_batch, args.train_len), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        version += 1
        start = time.perf_counter()
        policy.publish({k: v.detach() for k, v in model.state_dict().items()}, version)
        phase.publish_seconds.append(time.perf_counter() - start)
        phase.train_steps += 1
        phase.publishes += 1


def run(args: argparse.Namespace) -> list[Phase]:
    from claw_train.models.tiny import build_tiny
    from claw_train.policy.inprocess import InProcessPolicy

    model_path = args.model or str(build_tiny())
    policy = InProcessPolicy(model_path, max_batch=args.max_batch, threads=args.serve_threads)
    phases = []
    try:
        asyncio.run(_load(policy, Phase("warmup"), args.clients, 2, args.max_new_tokens))
        for name in ("idle", "publish", "train"):
            phase = Phase(name)
            stop = threading.Event()
            start_version = policy.published_version
            worker = None
            if name == "publish":
                target = (policy, phase, stop, args.publish_ms / 1000, start_version, args.trainer_threads)
                worker = threading.Thread(target=_publisher, args=target)
            elif name == "train":
                worker = threading.Thread(target=_trainer, args=(policy, model_path, phase, stop, args, start_version))
            if worker:
                worker.start()
                time.sleep(0.5)  # let it get going
            asyncio.run(_load(policy, phase, args.clients, args.requests, args.max_new_tokens))
            stop.set()
            if worker:
                worker.join()
            phases.append(phase)
    finally:
        policy.close()
    return phases


def values(phases: list[Phase], args: argparse.Namespace) -> dict[str, Any]:
    """The figures as written: the settings, each phase's latencies and counts, the failures."""
    idle = phases[0]
    settings = ("clients", "requests", "max_new_tokens", "max_batch", "publish_ms", "train_batch", "train_len")
    return {
        "settings": {
            "model": args.model or "tiny",
            **{k: getattr(args, k) for k in settings},
            "serve_threads": args.serve_threads,
            "trainer_threads": args.trainer_threads,
        },
        "phases": {
            p.name: {
                "p50_ms": 1000 * p.pct(0.5),
                "p99_ms": 1000 * p.pct(0.99),
                "p50_ratio": p.pct(0.5) / idle.pct(0.5),
                "p99_ratio": p.pct(0.99) / idle.pct(0.99),
                "mean_ms": 1000 * statistics.mean(p.latencies) if p.latencies else None,
                "requests": len(p.latencies),
                "failed": p.failures,
                "publishes": p.publishes,
                "ms_per_publish": 1000 * statistics.mean(p.publish_seconds) if p.publish_seconds else None,
                "train_steps": p.train_steps,
                "versions_seen": len(p.versions),
            }
            for p in phases
        },
        "failed": sum(p.failures for p in phases),
        "idle_mean_ms": 1000 * statistics.mean(idle.latencies),
    }


def report(phases: list[Phase], args: argparse.Namespace) -> None:
    idle = phases[0]
    print(
        f"inprocess serving: {args.clients} clients x {args.requests} requests, {args.max_new_tokens} new tokens, "
        f"max_batch {args.max_batch}, torch threads: serving {args.serve_threads}, trainer {args.trainer_threads}"
    )
    header = f"{'phase':8} {'p50 ms':>8} {'p99 ms':>8} {'p50/idle':>9} {'p99/idle':>9} {'failed':>7} "
    print(header + f"{'publishes':>10} {'ms/publish':>11} {'train steps':>12} {'versions seen':>14}")
    for p in phases:
        per_publish = f"{1000 * statistics.mean(p.publish_seconds):.1f}" if p.publish_seconds else "-"
        print(
            f"{p.name:8} {1000 * p.pct(0.5):8.1f} {1000 * p.pct(0.99):8.1f} {p.pct(0.5) / idle.pct(0.5):9.2f} "
            f"{p.pct(0.99) / idle.pct(0.99):9.2f} {p.failures:7d} {p.publishes:10d} {per_publish:>11} "
            f"{p.train_steps:12d} {len(p.versions):14d}"
        )
    total = sum(p.failures for p in phases)
    print(f"failed requests: {total}  (mean latency idle {1000 * statistics.mean(idle.latencies):.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model directory (default: the tiny model)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25, help="requests per client per phase")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--publish-ms", type=float, default=50.0)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--train-len", type=int, default=128)
    parser.add_argument("--trainer-threads", type=int, default=1, help="torch threads of the trainer thread")
    parser.add_argument("--serve-threads", type=int, default=1, help="torch threads of the serving worker")
    record.options(parser, "serving")
    args = parser.parse_args()
    phases = run(args)
    report(phases, args)
    record.write(args.name, values(phases, args), folder=args.results)
    if any(p.failures for p in phases):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
