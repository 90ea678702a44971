"""MiniWoB++ pages as GUI tasks, run the way BrowserGym runs them.

Point the env at a folder of MiniWoB++-style pages (``GUIEnv(tasks=DIR)``, ``claw-train --env gui --tasks
DIR``): every ``*.html`` in it is a task (read by :func:`claw_envs.gui.tasks.miniwob_tasks`). A page is opened
from ``file://`` (its ``../core/`` scripts load from the folder above when the folder is MiniWoB's
``html/miniwob``), and its episode is started as MiniWoB's own env starts it: ``Math.seedrandom(seed)``, then
``core.startEpisodeReal()``. The seed is drawn from the env's ``np_random``, so ``reset(seed=s)`` gives the same
problem (instruction and page) every time. The instruction is the text of ``#query``.

The page's wall-clock limit (``core.EPISODE_MAX_TIME``, 10 s unless the page sets another) does not end an
episode: as BrowserGym does, the limit the page's timer runs on is raised far past any episode, and the env's step
limit decides instead. After every action the page's own JavaScript globals say whether the episode is over
(``WOB_DONE_GLOBAL``) and how it went: ``WOB_RAW_REWARD_GLOBAL`` decides (solved when above 0, as BrowserGym
counts it), and ``info["miniwob"]`` reports it beside MiniWoB's time-scaled reward, computed as the page would
have against its own limit, which never decides anything. These tasks have no oracle script.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.tasks import Task

TIMER_MS = 1_000_000_000  # what the page's own timer runs on: 11.6 days, under setTimeout's 2**31 - 1 ms
START_JS = """([seed, timerMs]) => {
  if (typeof core === "undefined" || typeof core.startEpisodeReal !== "function") return null;
  if (typeof Math.seedrandom === "function") {
    Math.seedrandom(seed);
  } else {  // a page with a core of its own: Math.random from a small seeded generator (mulberry32)
    let state = seed >>> 0;
    Math.random = () => {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = Math.imul(state ^ (state >>> 15), state | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  window.__clawPageLimit = Number(core.EPISODE_MAX_TIME) || 10000;
  Object.defineProperty(core, "EPISODE_MAX_TIME", {
    configurable: true,
    get: () => timerMs,
    set: (value) => { window.__clawPageLimit = Number(value) || window.__clawPageLimit; },
  });
  if (typeof core.endEpisode === "function") {
    const end = core.endEpisode;
    core.endEpisode = function (reward, timeProportional, reason) {
      if (!window.__clawEnd && core.EP_TIMER !== null && !WOB_DONE_GLOBAL) {
        window.__clawEnd = {proportional: Boolean(timeProportional), ms: Date.now() - (core.ept0 || Date.now())};
      }
      return end.apply(this, arguments);
    };
  }
  core.startEpisodeReal();
  return {limit: window.__clawPageLimit};
}"""
READY_JS = "typeof WOB_TASK_READY === 'undefined' || WOB_TASK_READY === true"
QUERY_JS = "(document.querySelector('#query') || {}).innerText || ''"
RESULT_JS = """() => {
  if (typeof WOB_DONE_GLOBAL === "undefined") return null;
  const raw = Number(WOB_RAW_REWARD_GLOBAL || 0), end = window.__clawEnd || {proportional: false, ms: 0};
  const limit = window.__clawPageLimit || 10000;
  return {
    done: Boolean(WOB_DONE_GLOBAL), raw: raw,
    timeScaled: end.proportional ? raw * Math.max(0, 1 - end.ms / limit) : raw,
    seconds: end.ms / 1000, limit: limit / 1000,
    reason: typeof WOB_REWARD_REASON === "undefined" || WOB_REWARD_REASON === null ? "" : String(WOB_REWARD_REASON),
  };
}"""


@dataclass(frozen=True)
class PageResult:
    """How a page's episode ended: ``raw_reward`` decides (``solved``: above 0); ``time_scaled_reward`` is MiniWoB's
    reward scaled by the time taken against the page's own limit (``page_limit_s``), reported only."""

    solved: bool
    reason: str
    raw_reward: float
    time_scaled_reward: float
    seconds: float
    page_limit_s: float

    def info(self) -> dict[str, Any]:
        """The ``info["miniwob"]`` of the step that ended the episode."""
        return asdict(self)


async def start_episode(backend: Any, task: Task, seed: int) -> str:
    """Open the page, start its episode with ``Math.random`` seeded by ``seed`` and return its instruction (the
    text of ``#query``)."""
    page = Path(str(task.data["miniwob"]))
    await backend.open(page.as_uri(), folder=Path(str(task.data["folder"])))
    if not await backend.evaluate(START_JS, [int(seed), TIMER_MS]):
        raise InfraFailure(f"{page.name} is not a MiniWoB++ page: it defines no core.startEpisodeReal()")
    for _ in range(50):
        if await backend.evaluate(READY_JS):
            break
        await asyncio.sleep(0.05)
    else:
        raise InfraFailure(f"{page.name} never set WOB_TASK_READY", StepStatus.BROWSER_FAILURE)
    return str(await backend.evaluate(QUERY_JS)).strip() or f"Complete the task on the page {page.name}."


async def episode_result(backend: Any) -> PageResult | None:
    """How the page's episode ended, or ``None`` while it goes on."""
    result = await backend.evaluate(RESULT_JS)
    if not result or not result.get("done"):
        return None
    raw = float(result.get("raw", 0))
    return PageResult(
        solved=raw > 0,
        reason=str(result.get("reason") or ""),
        raw_reward=raw,
        time_scaled_reward=float(result.get("timeScaled", raw)),
        seconds=float(result.get("seconds", 0)),
        page_limit_s=float(result.get("limit", 10)),
    )
