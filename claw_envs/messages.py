"""Helpers over an episode's chat, for the families, the judges and the trainer alike: the earlier steps as a judge
prompt reads them (:func:`step_history`), a hint put into a chat (:func:`hinted_messages`: the OPD teacher's prompt,
hinted demonstrations), and the mark of a reply cut off at the token limit (:class:`CutOffText`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from claw_envs.core import Message


def step_history(
    messages: Sequence[Message], *, width: int = 300, limit: int = 3000, last: int | None = None, task: bool = False
) -> str:
    """The earlier steps of an episode for a judge prompt: the messages after the system prompt as ``role: text``
    lines (tool calls when there is no text; white space folded), each cut at ``width`` characters, the whole kept
    to its last ``limit``. The first message (the task) is left out unless ``task``; ``last`` keeps only the last
    that many messages."""
    earlier = [m for m in messages if m.get("role") != "system"][0 if task else 1 :]
    lines = []
    for m in earlier[-last:] if last else earlier:
        text = " ".join(str(m.get("content") or m.get("tool_calls")).split())
        lines.append(f"{m.get('role')}: {text if len(text) <= width else text[: width - 1] + '…'}")
    return "\n".join(lines)[-limit:]


def hinted_messages(messages: Sequence[Message], hint: str) -> list[Message]:
    """``messages`` with ``hint`` appended to the last user message as ``"\\n\\n[Note: <hint>]"``.

    The one format for hints everywhere (demonstrations, the OPD teacher prompt). Nothing is changed in
    place; with no user message, the note becomes a new user message.
    """
    out = [dict(m) for m in messages]
    note = f"[Note: {hint.strip()}]"
    for m in reversed(out):
        if m.get("role") == "user":
            m["content"] = f"{m.get('content') or ''}\n\n{note}"
            return out
    return [*out, {"role": "user", "content": note}]


class CutOffText(str):
    """An action whose generation was cut off at the policy's token limit (finish reason ``length``).

    It is the text itself (a ``str``), so every family reads it as before; a family that grades replies as
    finished text (the conversation rubric) checks :func:`is_cut_off` and does not count a cut reply as complete.
    """

    __slots__ = ()


def is_cut_off(action: Any) -> bool:
    """Whether ``action`` was marked as cut off at the token limit (:class:`CutOffText`)."""
    return isinstance(action, CutOffText)
