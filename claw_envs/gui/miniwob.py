"""MiniWoB++ pages as GUI tasks, read the way BrowserGym reads them.

Point the env at a folder of MiniWoB++-style pages (``GUIEnv(tasks=DIR)``, ``claw-train --env gui --tasks
DIR``): every ``*.html`` in it is a task. A page is opened from ``file://`` (its ``../core/`` scripts load from
the folder above when the folder is MiniWoB's ``html/miniwob``), its episode is started with
``core.startEpisodeReal()``, and the instruction is the text of ``#query``. After every action the page's own
JavaScript globals say whether the episode is over (``WOB_DONE_GLOBAL``) and how it went
(``WOB_RAW_REWARD_GLOBAL``, counted as solved when above 0, as BrowserGym does; ``WOB_REWARD_REASON``).
These tasks have no oracle script.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.gui.tasks import DEFAULT_MAX_STEPS
from claw_envs.tasks import Task, TaskList

START_JS = """() => {
  if (typeof core === "undefined" || typeof core.startEpisodeReal !== "function") return false;
  core.startEpisodeReal();
  return true;
}"""
READY_JS = "typeof WOB_TASK_READY === 'undefined' || WOB_TASK_READY === true"
QUERY_JS = "(document.querySelector('#query') || {}).innerText || ''"
RESULT_JS = """() => typeof WOB_DONE_GLOBAL === "undefined" ? null : {
  done: Boolean(WOB_DONE_GLOBAL), raw: Number(WOB_RAW_REWARD_GLOBAL || 0),
  reason: typeof WOB_REWARD_REASON === "undefined" || WOB_REWARD_REASON === null ? "" : String(WOB_REWARD_REASON)
}"""


def task_root(folder: Path) -> Path:
    """The folder a page may read files from: MiniWoB's ``html/`` when ``folder`` is its ``html/miniwob``."""
    folder = folder.resolve()
    return folder.parent if (folder.parent / "core").is_dir() and not (folder / "core").is_dir() else folder


def miniwob_tasks(folder: Path, split: str = "train") -> TaskList:
    """One task per ``*.html`` page in ``folder`` (id ``miniwob.<name>``); the same pages serve every split."""
    pages = sorted(p for p in folder.resolve().glob("*.html") if p.is_file())
    if not pages:
        raise ValueError(f"no *.html pages in {folder}")
    root = task_root(folder)
    tasks = [
        Task(f"miniwob.{page.stem}", split, {"backend": "browser", "miniwob": str(page), "folder": str(root),
                                             "max_steps": DEFAULT_MAX_STEPS})
        for page in pages
    ]  # fmt: skip
    return TaskList(tasks, split=split)


async def start_episode(backend: Any, task: Task) -> str:
    """Open the page, start its episode and return its instruction (the text of ``#query``)."""
    page = Path(str(task.data["miniwob"]))
    await backend.open(page.as_uri(), folder=Path(str(task.data["folder"])))
    if not await backend.evaluate(START_JS):
        raise InfraFailure(f"{page.name} is not a MiniWoB++ page: it defines no core.startEpisodeReal()")
    for _ in range(50):
        if await backend.evaluate(READY_JS):
            break
        await asyncio.sleep(0.05)
    else:
        raise InfraFailure(f"{page.name} never set WOB_TASK_READY", StepStatus.BROWSER_FAILURE)
    return str(await backend.evaluate(QUERY_JS)).strip() or f"Complete the task on the page {page.name}."


async def episode_result(backend: Any) -> tuple[bool, str] | None:
    """``(solved, reason)`` once the page says its episode is over, else ``None``."""
    result = await backend.evaluate(RESULT_JS)
    if not result or not result.get("done"):
        return None
    return float(result.get("raw", 0)) > 0, str(result.get("reason") or "")
