"""GUI env costs, measured in this one run (prints a table; not a test).

* **step**: a claw/GUI-v0 step — parse ``click('N')``, click the element, read the app's messages, take the
  screenshot (and decode it to the observation array), read the accessibility tree, score the step — against the
  same operations in raw Playwright on the same page (``locator.click``, ``page.screenshot``,
  ``page.aria_snapshot``). The click toggles a table's sort, so every step changes the screen.
* **reset**: ``env.reset`` of a browser task (new context, page load, first observation) and of a desktop task
  (a new Tk app process on the env's Xvfb, first observation).
* **episodes/s**: oracle episodes of the browser tasks, one env alone vs 4 envs in parallel in one event loop.

Writes ``bench/results/gui.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``repeats``, ``step``
(``ours_ms``, ``bare_ms``, ``ratio``, ``n``), ``reset`` (``browser_ms``, ``desktop_ms``, ``n``), ``episodes``
(``episodes``, ``one_env_per_s``, ``four_envs_per_s``, ``ratio``, ``solved_one_env``, ``solved_four_envs``,
``not_solved``). ``bench/envs.py`` measures the same and writes it under the ``gui`` key of its own file.

Run: ``.venv/bin/python bench/gui.py [--repeats N]`` (about 2 minutes at the default 30 on 2 cores, most of it the
48 oracle episodes; ``--repeats 3`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import record

from claw_envs.gui.env import GUIEnv
from claw_envs.gui.server import serve
from claw_envs.gui.tasks import APPS, builtin_tasks


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


async def step_times(repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per GUI step through the env, and per the same operations in raw Playwright, interleaved (one of
    each in turn, so a change in the machine's load hits both alike)."""
    from playwright.async_api import async_playwright

    from claw_envs.gui.browser import CHROMIUM, CHROMIUM_FLAGS

    env = GUIEnv(split="train", max_turns=repeats + 10)
    ours, bare = [], []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True)
        try:
            page = await browser.new_page(viewport={"width": 800, "height": 600})
            await page.goto(serve(Path(str(APPS))) + "table.html", wait_until="load")
            button = page.get_by_role("button", name="Sort by price")
            await env.areset(options={"task_id": "table-price"})
            bid = env._screen.find("button", "Sort by price").id
            for i in range(repeats + 3):
                start = time.perf_counter()
                await env.astep(f"click('{bid}')")
                middle = time.perf_counter()
                await button.click()
                await page.screenshot(type="png")
                await page.aria_snapshot()
                if i >= 3:
                    ours.append(middle - start)
                    bare.append(time.perf_counter() - middle)
        finally:
            await env.aclose()
            await browser.close()
    return ours, bare


async def reset_times(repeats: int) -> dict[str, list[float]]:
    """Seconds per ``reset`` of browser tasks (cycled) and of a desktop task, after a warm-up reset each."""
    env = GUIEnv(split="all")
    browser_ids = [t.id for t in env.tasks if t.data["backend"] == "browser"]
    out: dict[str, list[float]] = {"browser": [], "desktop": []}
    try:
        for kind, ids in (("browser", browser_ids), ("desktop", ["desktop-notes"])):
            await env.areset(options={"task_id": ids[0]})
            for i in range(repeats):
                await env.astep("WAIT")  # a step between resets, as in training
                start = time.perf_counter()
                await env.areset(options={"task_id": ids[i % len(ids)]})
                out[kind].append(time.perf_counter() - start)
    finally:
        await env.aclose()
    return out


async def _oracle_episodes(env: GUIEnv, task_ids: list[str]) -> list[str]:
    """Play the oracle on each task; the tasks it did not solve, with the last next state's text."""
    failed = []
    for task_id in task_ids:
        await env.areset(options={"task_id": task_id})
        while True:
            *_, terminated, truncated, info = await env.astep(env.reference_action() or "DONE")
            if terminated or truncated:
                if info["next_state"].outcome != 1.0:
                    failed.append(f"{task_id} ({info['status']}: {info['next_state'].text[:200]!r})")
                break
    return failed


async def episodes_per_second(n_envs: int, episodes: int) -> tuple[float, list[str]]:
    """Oracle episodes of the browser tasks per second with ``n_envs`` envs in one event loop (after a warm-up)."""
    ids = [t.id for t in builtin_tasks("train") if t.data["backend"] == "browser"]
    envs = [GUIEnv(split="train") for _ in range(n_envs)]
    try:
        await asyncio.gather(*(e.areset(options={"task_id": ids[0]}) for e in envs))  # browsers started
        plan = [ids[i % len(ids)] for i in range(episodes)]
        start = time.perf_counter()
        failed = await asyncio.gather(*(_oracle_episodes(e, plan[k::n_envs]) for k, e in enumerate(envs)))
        return episodes / (time.perf_counter() - start), [f for env_failed in failed for f in env_failed]
    finally:
        for e in envs:
            await e.aclose()


def measure(repeats: int) -> dict[str, Any]:
    """The measured values (also written by ``bench/envs.py``, under its ``gui`` key)."""
    ours, bare = asyncio.run(step_times(repeats))
    resets = asyncio.run(reset_times(max(3, repeats // 3)))
    episodes = 24
    one, failed_one = asyncio.run(episodes_per_second(1, episodes))
    four, failed_four = asyncio.run(episodes_per_second(4, episodes))
    return {
        "repeats": repeats,
        "step": {
            "ours_ms": _median_ms(ours),
            "bare_ms": _median_ms(bare),
            "ratio": statistics.median(ours) / statistics.median(bare),
            "n": len(ours),
        },
        "reset": {
            "browser_ms": _median_ms(resets["browser"]),
            "desktop_ms": _median_ms(resets["desktop"]),
            "n": len(resets["browser"]),
        },
        "episodes": {
            "episodes": episodes,
            "one_env_per_s": one,
            "four_envs_per_s": four,
            "ratio": four / one,
            "solved_one_env": episodes - len(failed_one),
            "solved_four_envs": episodes - len(failed_four),
            "not_solved": failed_one + failed_four,
        },
    }


def lines(values: dict[str, Any]) -> list[str]:
    """``values`` (from :func:`measure`) as the printed lines."""
    step, reset, ep = values["step"], values["reset"], values["episodes"]
    n = ep["episodes"]
    return [
        f"GUI step (click + screenshot + tree): env {step['ours_ms']:.0f} ms vs raw Playwright "
        f"{step['bare_ms']:.0f} ms = {step['ratio']:.2f}x",
        f"GUI reset: browser task {reset['browser_ms']:.0f} ms, desktop task {reset['desktop_ms']:.0f} ms (medians)",
        f"GUI oracle episodes/s: 1 env {ep['one_env_per_s']:.2f}, 4 envs in parallel {ep['four_envs_per_s']:.2f} "
        f"({ep['ratio']:.2f}x); solved {ep['solved_one_env']}/{n} and {ep['solved_four_envs']}/{n}",
        *(f"  not solved: {f}" for f in ep["not_solved"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    record.options(parser, "gui")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({os.cpu_count()} CPUs, load average {load}; medians over {args.repeats} steps after 3 warm-up steps)")
    values = measure(args.repeats)
    for line in lines(values):
        print(line)
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
