"""Demonstrations for bootstrapping a small model on the terminal family: the built-in training tasks' solution
commands, each run once per process in a real sandbox so the outputs in the history are real."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from claw_envs.core import ClawEnv, Message
from claw_envs.shell_turns import assistant_message, fenced_text, read_turn, reply_message, tool_call_text
from claw_envs.tasks import Task
from claw_envs.terminal.tasks import builtin_tasks

DEMO_FINALS = (
    "Done.",
    "The task is done.",
    "Finished: the files are in place.",
    "That completes the task.",
    "All done, the result is ready.",
)


def demonstrations(
    n: int,
    seed: int,
    *,
    opening: Callable[[Task], list[Message]],
    env_class: type[ClawEnv],
    sandbox: str,
    sandbox_options: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """``n`` demonstrations: a built-in training task's opening (``opening(task)``: the asking env's) and the first
    k solution turns (tool calls or ```bash blocks, with their real outputs), and the next turn (or a final message)
    as the completion. The solutions are run once per process, in an ``env_class`` env on a ``sandbox`` sandbox."""
    rng = np.random.default_rng(seed)
    train = builtin_tasks("train")
    runs = _solution_runs(env_class, sandbox, json.dumps(dict(sandbox_options), sort_keys=True))
    demos = []
    for _ in range(n):
        task_id, steps = runs[int(rng.integers(len(runs)))]
        style = "tool" if rng.random() < 0.5 else "fenced"
        upto = int(rng.integers(len(steps) + 1))
        messages = opening(train.get(task_id))
        for k, (command, output) in enumerate(steps[:upto], 1):
            action = _action_text(command, style)
            turn = read_turn(action, id_prefix=f"call_{k}_")
            messages += [assistant_message(turn, action), reply_message(turn, output)]
        if upto < len(steps):
            completion = _action_text(steps[upto][0], style)
        else:
            completion = DEMO_FINALS[int(rng.integers(len(DEMO_FINALS)))]
        demos.append({"messages": messages, "completion": completion})
    return demos


def _action_text(command: str, style: str) -> str:
    return tool_call_text(command) if style == "tool" else fenced_text(command)


@functools.cache
def _solution_runs(
    env_class: type[ClawEnv], sandbox_kind: str, options_json: str
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """``(task id, ((command, output text), ...))`` for every built-in training task, from real runs."""
    env = env_class(split="train", sandbox=sandbox_kind, sandbox_options=json.loads(options_json))
    runs = []
    try:
        for task in env.tasks:
            if "folder" in task.data:
                continue  # a folder's solution is one long script: no demonstration for a small model
            env.reset(options={"task_id": task.id})
            steps = []
            for command in task.data.get("solution", []):
                obs, *_, info = env.step(tool_call_text(command))
                if info["status"] != "ok":
                    raise RuntimeError(f"cannot record the solution of {task.id}: {obs}")
                steps.append((command, obs))
            runs.append((task.id, tuple(steps)))
    finally:
        env.close()
    return tuple(runs)
