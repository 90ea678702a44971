"""Environment-side overheads, as ratios measured in this one run (prints a table; not a test).

Each row times the same work two ways, ``ours`` (through claw) and ``bare`` (the plain way), and
prints both medians and ``ours / bare``; then the GUI figures of ``bench/gui.py``. To add a row, write a function
``(repeats) -> Row`` (or a list of rows) and put it in ``ROWS``.

Writes ``bench/results/envs.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``repeats``, ``warmup``,
``rows.<key>`` per row (``name``, ``ours_ms``, ``bare_ms``, ``ratio``, ``n``; the SWE resets also ``warmup``: 1, the
large one ``source`` and ``files``) with the keys ``sandbox_true``, ``echo_pool_local``, ``toolcall_python_step``,
``terminal_command_step``, ``terminal_oneshot_step``, ``terminal_shell_step``, ``swe_reset_builtin``,
``swe_reset_large``, ``swe_command_step`` (and ``echo_pool_ray`` with ``--ray``), and ``gui``: ``bench/gui.py``'s
values (``gui.step.ratio``, ...).

Run: ``.venv/bin/python bench/envs.py [--repeats N] [--ray]`` (a few minutes at the default 50 on 2 idle cores;
``--repeats 3`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import record

import claw_envs  # noqa: F401  registers the env ids
from claw_envs.pool import EnvPool
from claw_envs.sandbox import make_sandbox


@dataclass
class Row:
    """One measurement: seconds per repetition, through claw (``ours``) and the plain way (``bare``); ``key`` names
    it in the results file (the measuring function's name), ``extra`` holds what else it measured."""

    key: str
    name: str
    ours: list[float]
    bare: list[float]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.bare)

    def values(self) -> dict[str, Any]:
        """The row as written: its name, both medians in ms, the ratio, the repetitions."""
        ours_ms, bare_ms = 1000 * statistics.median(self.ours), 1000 * statistics.median(self.bare)
        n = len(self.ours)
        return {"name": self.name, "ours_ms": ours_ms, "bare_ms": bare_ms, "ratio": self.ratio, "n": n, **self.extra}


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
    return Row("sandbox_true", name, ours, bare)


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
    return Row("echo_pool_local", "Echo step: EnvPool(local) vs direct env.step", ours, _direct_step_times(repeats))


def echo_pool_ray(repeats: int) -> Row:
    """An Echo step through ``EnvPool(backend="ray")`` (an actor call) vs a direct ``env.step``."""
    ours = _pool_step_times(repeats, "ray")
    return Row("echo_pool_ray", "Echo step: EnvPool(ray) vs direct env.step", ours, _direct_step_times(repeats))


def _env_step_row(key: str, name: str, env_id: str, action: str, bare: list[float], repeats: int) -> Row:
    """``action`` as a step of ``env_id`` (one long episode, so every step runs it) against ``bare`` timings."""
    env = gym.make(env_id, split="test", max_turns=repeats + 4).unwrapped
    env.reset(seed=0)
    try:
        ours = timed(lambda: env.step(action), repeats)
    finally:
        env.close()
    return Row(key, name, ours, bare)


def toolcall_python_step(repeats: int) -> Row:
    """A ToolCall-v0 step running ``print(2 + 2)`` (parse the call, run it in the episode's sandbox, build
    the next state) vs a bare sandboxed ``python -c`` of the same code."""
    from claw_envs.toolcall.env import tool_call_text

    code = "print(2 + 2)"
    with make_sandbox("local") as sandbox:
        bare = timed(lambda: sandbox.run([sandbox.python, "-c", code]), repeats)
    name = "ToolCall python step vs sandboxed `python -c`"
    return _env_step_row("toolcall_python_step", name, "claw/ToolCall-v0", tool_call_text(code), bare, repeats)


def terminal_command_step(repeats: int) -> Row:
    """A Terminal-v0 step running ``ls -l`` as a bash tool call (parse, run in the episode's persistent shell, read
    the exit code and output into a next state) vs the same command run bare (one-shot) in a sandbox."""
    from claw_envs.shell_turns import tool_call_text

    command = "ls -l"
    with make_sandbox("local") as sandbox:
        bare = timed(lambda: sandbox.run(command), repeats)
    name = "Terminal command step vs the bare sandboxed command"
    return _env_step_row("terminal_command_step", name, "claw/Terminal-v0", tool_call_text(command), bare, repeats)


def terminal_oneshot_step(repeats: int) -> Row:
    """The same Terminal-v0 step with ``shell="oneshot"`` (each command a fresh sandboxed shell) vs the bare command."""
    from claw_envs.shell_turns import tool_call_text

    command = "ls -l"
    with make_sandbox("local") as sandbox:
        bare = timed(lambda: sandbox.run(command), repeats)
    env = gym.make("claw/Terminal-v0", split="test", max_turns=repeats + 4, shell="oneshot").unwrapped
    env.reset(seed=0)
    try:
        ours = timed(lambda: env.step(tool_call_text(command)), repeats)
    finally:
        env.close()
    name = "Terminal command step (shell=oneshot) vs the bare sandboxed command"
    return Row("terminal_oneshot_step", name, ours, bare)


def terminal_shell_step(repeats: int) -> Row:
    """A Terminal-v0 step in its persistent shell vs the same command sent straight to a ``PersistentShell``: what the
    env adds (parse, next state, history) on top of the shell."""
    from claw_envs.sandbox.shell import PersistentShell
    from claw_envs.shell_turns import tool_call_text

    command = "ls -l"
    with make_sandbox("local") as sandbox:
        shell = PersistentShell(sandbox)
        bare = timed(lambda: shell.run(command), repeats)
        shell.close()
    name = "Terminal command step vs the same command in a bare PersistentShell"
    return _env_step_row("terminal_shell_step", name, "claw/Terminal-v0", tool_call_text(command), bare, repeats)


def _swe_resets(repeats: int, mirror: str, commit: str) -> tuple[list[float], list[float]]:
    """A workspace reset as SWE-v0 does it (new sandbox, a repository borrowing the mirror's objects, checkout) vs a new
    sandbox with a fresh full clone and checkout of the same mirror."""
    from claw_envs.swe.workspace import Prepared, checkout_command, fresh_clone_command

    prepared = Prepared(mirror=Path(mirror))
    options = {**prepared.sandbox_options("local", {}), "disk_mb": 1024, "cpu_seconds": 120}
    env = prepared.command_env("local")

    def reset(command: str) -> None:
        with make_sandbox("local", **options) as sandbox:
            done = sandbox.run(command, timeout=300, env=env)
            if not done.ok:
                raise RuntimeError(done.stderr[-500:])

    return timed(lambda: reset(checkout_command(commit)), repeats, 1), timed(
        lambda: reset(fresh_clone_command(commit)), repeats, 1
    )


def _source_repo(folder: Path) -> tuple[str, int]:
    """A git repository (one commit) of the largest installed package among a few, as a stand-in for a real
    project of SWE-bench's size; returns (its name, its file count)."""
    import site

    candidates = [Path(p) / name for p in site.getsitepackages() for name in ("sympy", "pandas", "numpy", "rich")]
    source = next(p for p in candidates if p.is_dir())
    shutil.copytree(source, folder / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=folder, check=True)
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "src"], cwd=folder, check=True)
    return source.name, sum(1 for f in folder.rglob("*") if f.is_file() and ".git" not in f.parts)


def swe_reset(repeats: int) -> list[Row]:
    """SWE-v0's cached reset vs a fresh clone + checkout: on a built-in repo and on a large real source tree."""
    from claw_envs.swe.repos import RepoSource
    from claw_envs.swe.tasks import builtin_instances

    rows = []
    n = max(3, repeats // 10)
    with tempfile.TemporaryDirectory() as tmp:
        task = builtin_instances("test").get("claw-examples__ledger-9")
        mirror = RepoSource(cache_dir=tmp).mirror(task.data["repo"], task.data["base_commit"])
        ours, bare = _swe_resets(n, str(mirror), task.data["base_commit"])
        label = "SWE reset (built-in ledger repo) vs fresh clone+checkout"
        rows.append(Row("swe_reset_builtin", label, ours, bare, {"warmup": 1}))
        name, files = _source_repo(Path(tmp) / "big")
        subprocess.run(["git", "clone", "-q", "--bare", str(Path(tmp) / "big"), str(Path(tmp) / "big.git")], check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(tmp) / "big", capture_output=True, text=True)
        ours, bare = _swe_resets(n, str(Path(tmp) / "big.git"), head.stdout.strip())
        label = f"SWE reset ({name} source, {files} files) vs fresh clone+checkout"
        rows.append(Row("swe_reset_large", label, ours, bare, {"warmup": 1, "source": name, "files": files}))
    return rows


def swe_command_step(repeats: int) -> Row:
    """An SWE-v0 step running ``ls -l`` as a bash tool call (parse, run at /testbed in the episode's sandbox,
    check the test files and .git, build the next state) vs the same command run bare in such a sandbox."""
    from claw_envs.swe.actions import tool_call_text
    from claw_envs.swe.env import SWEEnv

    command = "ls -l"
    with tempfile.TemporaryDirectory() as tmp:
        env = SWEEnv(split="test", cache_dir=tmp, max_turns=repeats + 4)
        env.reset(options={"task_id": "claw-examples__ledger-9"})
        try:
            env.step(tool_call_text("bash", {"command": "true"}))  # the checkout happens on the first command
            ours = timed(lambda: env.step(tool_call_text("bash", {"command": command})), repeats)
            options = env.prepared.sandbox_options("local", env.instance)
            with make_sandbox("local", **options) as sandbox:
                bare = timed(lambda: sandbox.run(command), repeats)
        finally:
            env.close()
    return Row("swe_command_step", "SWE command step vs the bare sandboxed command", ours, bare)


ROWS: list[Callable[[int], Row | list[Row]]] = [
    sandbox_true,
    echo_pool_local,
    toolcall_python_step,
    terminal_command_step,
    terminal_oneshot_step,
    terminal_shell_step,
    swe_reset,
    swe_command_step,
]


def print_rows(rows: list[Row], repeats: int) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"medians over {repeats} repetitions each (after 3 warm-up runs), measured in this run")
    print(f"({os.cpu_count()} CPUs, load average {load}: ratios are comparable within one run, not across machines)")
    width = max(len(r.name) for r in rows)
    print(f"{'measurement':<{width}}  {'ours ms':>9}  {'bare ms':>9}  {'ours/bare':>9}")
    for r in rows:
        v = r.values()
        print(f"{r.name:<{width}}  {v['ours_ms']:>9.3f}  {v['bare_ms']:>9.3f}  {r.ratio:>8.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--ray", action="store_true", help="add the Ray backend row (starts a local Ray, ~15 s)")
    record.options(parser, "envs")
    args = parser.parse_args()
    measures = ROWS + ([echo_pool_ray] if args.ray else [])
    measured = [measure(args.repeats) for measure in measures]
    rows = [r for m in measured for r in (m if isinstance(m, list) else [m])]
    print_rows(rows, args.repeats)
    import gui  # bench/gui.py: GUI step vs raw Playwright, resets, episodes/s

    gui_values = gui.measure(min(args.repeats, 30))
    for line in gui.lines(gui_values):
        print(line)
    values = {"repeats": args.repeats, "warmup": 3, "rows": {r.key: r.values() for r in rows}, "gui": gui_values}
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
