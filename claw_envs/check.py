"""Task checks (``claw-envs check``): every task must be solvable by its oracle and not by doing nothing.

For each task two episodes run on the env itself, through the public contract: the **oracle** plays
:meth:`~claw_envs.core.ClawEnv.reference_action` until the episode ends and must reach outcome 1.0 (solved);
the **null** agent plays :meth:`~claw_envs.core.ClawEnv.null_action` (submit at once, an empty patch, ``DONE``)
and must not. A task that fails either, or whose episode hits an infrastructure failure, is named with why —
broken upstream tasks exist, and this is what catches them before they poison a training run.

An env may say at reset what of the task's environment it only approximates (``info["approximations"]``, a list
of lines: a Dockerfile line it skipped, a tool it lacks): a task whose oracle passes so "ran with an approximate
environment", reported apart from a clean pass. The last step's ``info["diagnosis"]`` (an env's guess at why an
episode ended unsolved, such as a command that needed the network) is added to a failing oracle's problem.

An env may also say at reset that this machine cannot run the task (``info["refused"]``, one line naming what it
lacks): the episode stops there and the task is **refused**, apart from a task that fails. An env whose tasks may
ship no solution says so with ``has_reference(task_id)``: such a task has **no oracle** — "no solution to play" —
and only the null agent runs (its reset provisions the task, its episode prepares and grades it); it passes when
that episode runs and does not solve it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from claw_envs.core import ClawEnv, StepStatus

SOLVED = 1.0
Agent = Literal["oracle", "null"]
Verdict = Literal["runs", "approximate", "no_oracle", "refused", "failed"]
NO_SOLUTION = "no solution to play"


@dataclass(frozen=True)
class EpisodeCheck:
    """One checked episode: its outcome, how many steps it took, and what went wrong (``None``: nothing)."""

    outcome: float | None
    steps: int
    error: str | None = None
    approximations: tuple[str, ...] = ()
    diagnosis: str | None = None
    refused: str | None = None


@dataclass(frozen=True)
class TaskCheck:
    """The verdict on one task. ``problem`` is ``None`` when the task passes; ``no_oracle`` when it has no solution
    (the ``oracle`` episode is then a placeholder that ran nothing)."""

    task_id: str
    oracle: EpisodeCheck
    null: EpisodeCheck | None
    seconds: float
    no_oracle: bool = False

    @property
    def problem(self) -> str | None:
        """Why the task fails: the oracle errs or fails to solve it, or doing nothing solves it (``None``: passes)."""
        if self.no_oracle:
            return self._null_problem()
        if self.oracle.error:
            return f"oracle: {self.oracle.error}"
        if self.oracle.outcome is None or self.oracle.outcome < SOLVED:
            why = f": {self.oracle.diagnosis}" if self.oracle.diagnosis else ""
            return f"the oracle solution does not solve it (outcome {self.oracle.outcome}){why}"
        return self._null_problem()

    def _null_problem(self) -> str | None:
        if self.null is None:
            return None
        if self.null.error:
            return f"null agent: {self.null.error}"
        if self.null.outcome is not None and self.null.outcome >= SOLVED:
            return "doing nothing already solves it (the check cannot tell a solution from none)"
        return None

    @property
    def approximate(self) -> bool:
        """Whether the task's episodes ran with an approximate environment (see the module docstring)."""
        return bool(self.oracle.approximations)

    @property
    def refused(self) -> str | None:
        """What this machine lacks to run the task, as its env said at reset (``None``: nothing)."""
        return self.oracle.refused or (self.null.refused if self.null else None)

    @property
    def verdict(self) -> Verdict:
        """``refused`` (this machine lacks what it needs), ``failed``, ``no_oracle`` (loadable, no solution to play),
        ``approximate`` or ``runs``."""
        if self.refused:
            return "refused"
        if self.problem is not None:
            return "failed"
        if self.no_oracle:
            return "no_oracle"
        return "approximate" if self.approximate else "runs"


async def play(env: ClawEnv, task_id: str, agent: Agent, max_steps: int | None = None) -> EpisodeCheck:
    """Run one episode of ``task_id`` with the oracle or the null agent; never raises for the task's faults."""
    pick: Callable[[], str | None] = env.reference_action if agent == "oracle" else env.null_action
    limit = max_steps or env.max_turns
    try:
        _, info = await env.areset(options={"task_id": task_id})
    except Exception as err:  # a task the env cannot even start is the finding
        return EpisodeCheck(None, 0, f"reset failed: {type(err).__name__}: {err}")
    approximations = tuple(str(line) for line in info.get("approximations") or ())
    if info.get("refused"):
        return EpisodeCheck(None, 0, f"[sandbox_failure] {info['refused']}", approximations, refused=info["refused"])
    for step in range(1, limit + 1):
        action = pick()
        if action is None:
            return EpisodeCheck(None, step - 1, f"no {agent} action at step {step}", approximations)
        _, _, terminated, truncated, info = await env.astep(action)
        ns = info["next_state"]
        if info["status"] != StepStatus.OK.value:
            return EpisodeCheck(None, step, ns.text, approximations)
        if terminated or truncated:
            return EpisodeCheck(ns.outcome, step, None, approximations, info.get("diagnosis"))
    return EpisodeCheck(None, limit, f"still running after {limit} steps", approximations)


async def check_task(env: ClawEnv, task_id: str) -> TaskCheck:
    """The oracle episode, then (when the env has a null action) the null episode of one task; only the null one
    when the task has no solution."""
    started = time.monotonic()
    has_reference = getattr(env, "has_reference", None)
    if has_reference is not None and not has_reference(task_id):
        null = await play(env, task_id, "null")
        oracle = EpisodeCheck(None, 0, None, null.approximations, refused=null.refused)
        return TaskCheck(task_id, oracle, null, time.monotonic() - started, no_oracle=True)
    oracle = await play(env, task_id, "oracle")
    null = None
    if not oracle.error and type(env).null_action is not ClawEnv.null_action:
        null = await play(env, task_id, "null")
    return TaskCheck(task_id, oracle, null, time.monotonic() - started)


async def check_env(
    env: ClawEnv, task_ids: Iterable[str], on_done: Callable[[TaskCheck], None] | None = None
) -> list[TaskCheck]:
    """:func:`check_task` for each id in turn (one env, so one sandbox or browser); ``on_done`` sees each verdict."""
    results = []
    for task_id in task_ids:
        result = await check_task(env, task_id)
        if on_done is not None:
            on_done(result)
        results.append(result)
    return results
