"""Demonstrations recorded from scripted episodes: the chat history before each scripted action, the action as the
completion, and the env's real answers in the history. Families without hand-written demonstrations (SWE, GUI)
build theirs from these, for a policy's warm start."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from claw_envs.core import ClawEnv

Row = dict[str, Any]


def record_episode(env: ClawEnv, task_id: str, act: Callable[[int], str | None]) -> list[Row]:
    """One episode on ``task_id``: ``act(k)`` gives the ``k``-th action (``None`` stops); one row per action.

    A step that the env could not carry out (``info["status"]`` not ``ok``), or an episode that does not end
    solved (outcome 1.0), is a :class:`RuntimeError`: a demonstration must not show a broken or failed episode."""
    _, info = env.reset(options={"task_id": task_id})
    tools = copy.deepcopy(info.get("tools"))
    rows: list[Row] = []
    for k in range(env.max_turns):
        action = act(k)
        if action is None:
            break
        row: Row = {"messages": copy.deepcopy(info["messages"]), "completion": action}
        rows.append(row | ({"tools": tools} if tools else {}))
        _, _, terminated, truncated, info = env.step(action)
        if info["status"] != "ok":
            raise RuntimeError(f"scripted step {k + 1} of {task_id} could not run ({info['status']}): {action[:200]}")
        if terminated or truncated:
            break
    outcome = info["next_state"].outcome if "next_state" in info else None
    if outcome != 1.0:
        raise RuntimeError(f"the scripted episode on {task_id} did not solve it (outcome {outcome})")
    return rows


def record_until(env: ClawEnv, episodes: Iterable[tuple[str, Callable[[int], str | None]]], n: int) -> list[Row]:
    """The ``(task_id, act)`` episodes recorded in order (:func:`record_episode`) until there are ``n`` rows or no
    episode is left: a short warm start does not pay for every episode."""
    rows: list[Row] = []
    for task_id, act in episodes:
        if len(rows) >= n:
            break
        rows += record_episode(env, task_id, act)
    return rows


def draw(rows: Sequence[Row], n: int, seed: int) -> list[Row]:
    """``n`` rows drawn from ``rows`` with replacement (every row once first when ``n`` allows), seeded."""
    if not rows:
        raise ValueError("no demonstrations were recorded")
    rng = np.random.default_rng(seed)
    order = [int(i) for i in rng.permutation(len(rows))]
    picks = order[:n] + [int(i) for i in rng.integers(len(rows), size=max(0, n - len(rows)))]
    return [copy.deepcopy(rows[i]) for i in picks]
