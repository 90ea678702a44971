"""Environment-side overheads, as ratios measured in this one run (prints a table; not a test).

Each row times the same work two ways, ``ours`` (through claw) and ``bare`` (the plain way), and
prints both medians and ``ours / bare``. To add a row, write a function ``(repeats) -> Row`` and put
it in ``ROWS``.

Run: ``.venv/bin/python bench/envs.py [--repeats N] [--ray]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym

import claw_envs  # noqa: F401  registers the env ids
from claw_envs.pool import EnvPool
from claw_envs.sandbox import make_sandbox


@dataclass
class Row:
    """One measurement: seconds per repetition, through claw (``ours``) and the plain way (``bare``)."""

    name: str
    ours: list[float]
    bare: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.bare)


def timed(fn: Callable[[], object], repeats: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def sandbox_true(repeats: int) -> Row:
    """``true`` through the local sandbox vs a bare ``subprocess.run``."""
    with make_sandbox("local") as sandbox:
        ours = timed(lambda: sandbox.run(["true"]), repeats)
        name = f"`true`: local sandbox ({sandbox.isolation}) vs subprocess.run"
    bare = timed(lambda: subprocess.run(["true"], check=True), repeats)
    return Row(name, ours, bare)


def _pool_step_times(repeats: int, backend: str) -> list[float]:
    """Seconds per Echo step through an EnvPool: the gap between consecutive agent calls."""
    stamps: list[float] = []

    async def agent(obs: object, info: dict) -> str:
        stamps.append(time.perf_counter())
        return "not the phrase"

    async def play() -> None:
        async with EnvPool("claw/Echo-v0", 1, env_kwargs={"max_turns": repeats + 4}, backend=backend) as pool:
            await pool.run_episode(agent, seed=0)

    asyncio.run(play())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return gaps[3:]  # the first steps warm up


def _direct_step_times(repeats: int) -> list[float]:
    env = gym.make("claw/Echo-v0", max_turns=repeats + 4).unwrapped
    env.reset(seed=0)
    try:
        return timed(lambda: env.step("not the phrase"), repeats)
    finally:
        env.close()


def echo_pool_local(repeats: int) -> Row:
    """An Echo step through ``EnvPool(backend="local")`` vs a direct ``env.step``."""
    ours = _pool_step_times(repeats, "local")
    return Row("Echo step: EnvPool(local) vs direct env.step", ours, _direct_step_times(repeats))


def echo_pool_ray(repeats: int) -> Row:
    """An Echo step through ``EnvPool(backend="ray")`` (an actor call) vs a direct ``env.step``."""
    ours = _pool_step_times(repeats, "ray")
    return Row("Echo step: EnvPool(ray) vs direct env.step", ours, _direct_step_times(repeats))


def _env_step_row(name: str, env_id: str, action: str, bare: list[float], repeats: int) -> Row:
    """``action`` as a step of ``env_id`` (one long episode, so every step runs it) against ``bare`` timings."""
    env = gym.make(env_id, split="test", max_turns=repeats + 4).unwrapped
    env.reset(seed=0)
    try:
        ours = timed(lambda: env.step(action), repeats)
    finally:
        env.close()
    return Row(name, ours, bare)


def toolcall_python_step(repeats: int) -> Row:
    """A ToolCall-v0 step running ``print(2 + 2)`` (parse the call, run it in the episode's sandbox, build
    the next state) vs a bare sandboxed ``python -c`` of the same code."""
    from claw_envs.toolcall.env import tool_call_text

    code = "print(2 + 2)"
    with make_sandbox("local") as sandbox:
        bare = timed(lambda: sandbox.run([sandbox.python, "-c", code]), repeats)
    name = "ToolCall python step vs sandboxed `python -c`"
    return _env_step_row(name, "claw/ToolCall-v0", tool_call_text(code), bare, repeats)


def terminal_command_step(repeats: int) -> Row:
    """A Terminal-v0 step running ``ls -l`` as a bash tool call (parse, run in the episode's sandbox, read the
    exit code and output into a next state) vs the same command run bare in a sandbox."""
    from claw_envs.terminal.actions import tool_call_text

    command = "ls -l"
    with make_sandbox("local") as sandbox:
        bare = timed(lambda: sandbox.run(command), repeats)
    name = "Terminal command step vs the bare sandboxed command"
    return _env_step_row(name, "claw/Terminal-v0", tool_call_text(command), bare, repeats)


ROWS: list[Callable[[int], Row]] = [sandbox_true, echo_pool_local, toolcall_python_step, terminal_command_step]


def print_rows(rows: list[Row], repeats: int) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"medians over {repeats} repetitions each (after 3 warm-up runs), measured in this run")
    print(f"({os.cpu_count()} CPUs, load average {load}: ratios are comparable within one run, not across machines)")
    width = max(len(r.name) for r in rows)
    print(f"{'measurement':<{width}}  {'ours ms':>9}  {'bare ms':>9}  {'ours/bare':>9}")
    for r in rows:
        ours_ms, bare_ms = 1000 * statistics.median(r.ours), 1000 * statistics.median(r.bare)
        print(f"{r.name:<{width}}  {ours_ms:>9.3f}  {bare_ms:>9.3f}  {r.ratio:>8.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--ray", action="store_true", help="add the Ray backend row (starts a local Ray, ~15 s)")
    args = parser.parse_args()
    rows = ROWS + ([echo_pool_ray] if args.ray else [])
    print_rows([measure(args.repeats) for measure in rows], args.repeats)


if __name__ == "__main__":
    main()
