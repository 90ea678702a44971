"""Demonstrations for the SWE family: a scripted fix of each built-in training instance, run for real.

Each episode looks at the code its gold patch changes (``sed -n`` over the first hunk), applies the patch
(``git apply`` with a here-document), runs the visible tests and submits — once with tool calls and once with
fenced bash blocks. Every prefix of an episode, with the real outputs, is a demonstration of its next turn.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from claw_envs.core import ClawEnv
from claw_envs.demos import draw, record_until
from claw_envs.shell_turns import fenced_text
from claw_envs.swe.actions import SUBMIT_MARKER, tool_call_text
from claw_envs.swe.tasks import builtin_instances

HUNK = re.compile(r"^--- a/(?P<path>\S+)\n\+\+\+ b/\S+\n@@ -(?P<start>\d+)(?:,(?P<length>\d+))? ", re.MULTILINE)
STYLES = ("tool", "fenced")


def demonstrations(
    n: int,
    seed: int,
    *,
    env_class: type[ClawEnv],
    sandbox: str,
    sandbox_options: Mapping[str, Any],
    env_options: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """``n`` demonstrations drawn from the recorded scripted fixes (see the module docstring): the instances are
    played in order, each in both styles, until there are ``n`` turns (all of them: 48). They are recorded once per
    process in an ``env_class`` env made with ``sandbox``, ``sandbox_options`` and ``env_options`` (its repository
    source)."""
    options = json.dumps(dict(sandbox_options), sort_keys=True)
    return draw(_recorded(env_class, sandbox, options, json.dumps(dict(env_options)), n), n, seed)


def script(instance: dict[str, Any], style: str) -> list[str]:
    """The turns of a scripted fix of ``instance``: look, patch, test, submit, as ``tool`` calls or ``fenced``."""
    patch = str(instance["patch"])
    hunk = HUNK.search(patch)
    if hunk is None:
        raise ValueError(f"{instance['instance_id']}: the gold patch has no hunk to look at")
    start, length = int(hunk["start"]), int(hunk["length"] or 1)
    commands = [
        f"sed -n '{max(1, start - 2)},{start + length + 1}p' {hunk['path']}",
        f"git apply <<'EOF'\n{patch}EOF",
        "python -m pytest -q 2>&1 | tail -n 3",
    ]
    if style == "tool":
        return [tool_call_text("bash", {"command": c}) for c in commands] + [tool_call_text("submit")]
    return [fenced_text(c) for c in [*commands, f"echo {SUBMIT_MARKER}"]]


@functools.cache
def _recorded(env_class: type[ClawEnv], sandbox: str, sandbox_json: str, options_json: str, n: int) -> tuple[Any, ...]:
    """The turns of the scripted fixes of the built-in training instances, recorded until there are ``n``."""
    train = builtin_instances("train")
    env = env_class(train, sandbox=sandbox, sandbox_options=json.loads(sandbox_json), **json.loads(options_json))
    episodes = ((task.id, _player(script(task.data, style))) for task in train for style in STYLES)
    try:
        return tuple(record_until(env, episodes, n))
    finally:
        env.close()


def _player(turns: list[str]) -> Callable[[int], str | None]:
    return lambda k: turns[k] if k < len(turns) else None
