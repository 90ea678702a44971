"""GUI env costs, measured in this one run (prints a table; not a test).

* **step**: a claw/GUI-v0 step — parse ``click('N')``, click the element, read the app's messages, take the
  screenshot (and decode it to the observation array), read the accessibility tree, score the step — against the
  same operations in raw Playwright on the same page (``locator.click``, ``page.screenshot``,
  ``page.aria_snapshot``). The click toggles a table's sort, so every step changes the screen.
* **reset**: ``env.reset`` of a browser task (new context, page load, first observation) and of a desktop task
  (a new Tk app process on the env's Xvfb, first observation).
* **episodes/s**: oracle episodes of the browser tasks, one env alone vs 4 envs in parallel in one event loop.

Run: ``.venv/bin/python bench/gui.py [--repeats N]`` (also called by ``bench/envs.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

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


def report(repeats: int) -> list[str]:
    """The measured lines (also used by ``bench/envs.py``)."""
    ours, bare = asyncio.run(step_times(repeats))
    resets = asyncio.run(reset_times(max(3, repeats // 3)))
    episodes = 24
    one, failed_one = asyncio.run(episodes_per_second(1, episodes))
    four, failed_four = asyncio.run(episodes_per_second(4, episodes))
    ratio = statistics.median(ours) / statistics.median(bare)
    return [
        f"GUI step (click + screenshot + tree): env {_median_ms(ours):.0f} ms vs raw Playwright "
        f"{_median_ms(bare):.0f} ms = {ratio:.2f}x",
        f"GUI reset: browser task {_median_ms(resets['browser']):.0f} ms, desktop task "
        f"{_median_ms(resets['desktop']):.0f} ms (medians)",
        f"GUI oracle episodes/s: 1 env {one:.2f}, 4 envs in parallel {four:.2f} ({four / one:.2f}x); "
        f"solved {episodes - len(failed_one)}/{episodes} and {episodes - len(failed_four)}/{episodes}",
        *(f"  not solved: {f}" for f in failed_one + failed_four),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({os.cpu_count()} CPUs, load average {load}; medians over {args.repeats} steps after 3 warm-up steps)")
    for line in report(args.repeats):
        print(line)


if __name__ == "__main__":
    main()
