"""Rollout throughput with 1, 2, 4, 8 env actors on Ray, for an env whose step waits on I/O (prints a table).

Each env lives in its own Ray actor (``EnvPool(backend="ray")``, what ``claw-train --ray-address`` uses); each
step awaits ``--delay`` seconds, as a sandbox call, a browser or a remote service would. For N actors the pool
plays ``N x --episodes`` episodes with at most N in flight, after one warm-up episode per actor (actor start-up is
not rollout throughput). ``vs linear`` is the N-actor throughput over N times the 1-actor throughput; ``vs ideal``
over N steps per ``--delay`` (no overhead at all).

Writes ``bench/results/scale.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``settings`` (the
options), ``ideal_steps_s`` (one actor with no overhead) and ``actors.<N>`` per actor count (``seconds``,
``steps_s``, ``speedup`` over the first count's per-actor rate, ``vs_linear``, ``vs_ideal``), e.g.
``actors.8.vs_linear``.

Run: ``.venv/bin/python bench/scale.py [--actors 1,2,4,8] [--delay 0.1] [--turns 5] [--episodes 4]
[--ray-address HOST:PORT]`` (without an address, a local Ray starts for the run; about a minute at the defaults,
most of it Ray's and the actors' start-up; ``--actors 1,2 --episodes 1 --turns 2`` for a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import record

ENV_ID = "benchscale/IOBound-v0"


class IOBoundEnv(gym.Env):
    """``max_turns`` steps that each wait ``delay`` seconds without using the CPU."""

    def __init__(self, delay: float = 0.1, max_turns: int = 5):
        self.delay = delay
        self.max_turns = max_turns
        self.turn = 0

    async def areset(self, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.turn = 0
        return "ready", {}

    async def astep(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        await asyncio.sleep(self.delay)
        self.turn += 1
        return f"step {self.turn}", 0.0, self.turn >= self.max_turns, False, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="scale:IOBoundEnv", disable_env_checker=True)  # Ray workers import it too


async def agent(obs: Any, info: dict) -> str:
    """A policy that answers at once: the env's waiting is what is measured."""
    return "go"


async def throughput(actors: int, episodes: int, delay: float, turns: int) -> tuple[float, float]:
    """Seconds for ``actors x episodes`` episodes on ``actors`` Ray env actors, and env steps per second."""
    from claw_envs.pool import EnvPool

    kwargs = {"delay": delay, "max_turns": turns}
    async with EnvPool(ENV_ID, actors, env_kwargs=kwargs, backend="ray", step_timeout=60) as pool:
        warm = await pool.run_episodes(agent, [{}] * actors)  # starts every actor
        requests = [{}] * (actors * episodes)
        start = time.perf_counter()
        results = await pool.run_episodes(agent, requests)
        seconds = time.perf_counter() - start
    failed = [r for r in warm + results if r.status != "ok"]
    if failed:
        raise RuntimeError(f"{len(failed)} episodes failed: {failed[0].error}")
    steps = sum(len(r.actions) for r in results)
    return seconds, steps / seconds


def main() -> None:
    """Parse options, start or join Ray, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", default="1,2,4,8", help="actor counts to measure (comma-separated)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds each env step waits")
    parser.add_argument("--turns", type=int, default=5, help="steps per episode")
    parser.add_argument("--episodes", type=int, default=4, help="timed episodes per actor")
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster instead of starting one")
    record.options(parser, "scale")
    args = parser.parse_args()
    counts = [int(n) for n in args.actors.split(",")]

    import ray

    here = str(Path(__file__).resolve().parent)
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}}
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False, runtime_env=runtime_env)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    ideal = 1 / args.delay
    print(f"env step waits {args.delay:g} s, {args.turns} steps per episode, {args.episodes} timed episodes per actor")
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; one actor at best: {ideal:.1f} steps/s")
    print(f"{'actors':>6}  {'seconds':>8}  {'steps/s':>8}  {'speed-up':>8}  {'vs linear':>9}  {'vs ideal':>8}")
    base = None
    actors = {}
    for n in counts:
        seconds, rate = asyncio.run(throughput(n, args.episodes, args.delay, args.turns))
        base = base or rate / counts[0]
        row = f"{n:>6}  {seconds:>8.2f}  {rate:>8.1f}  {rate / base:>7.2f}x  {rate / (n * base):>9.2f}"
        print(f"{row}  {rate / (n * ideal):>8.2f}")
        actors[str(n)] = {
            "seconds": seconds,
            "steps_s": rate,
            "speedup": rate / base,
            "vs_linear": rate / (n * base),
            "vs_ideal": rate / (n * ideal),
        }
    ray.shutdown()
    settings = {"delay": args.delay, "turns": args.turns, "episodes": args.episodes, "ray_address": args.ray_address}
    record.write(args.name, {"settings": settings, "ideal_steps_s": ideal, "actors": actors}, folder=args.results)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so that this module is importable as ``scale``
    main()
