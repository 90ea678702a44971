"""How ``claw-serve`` reads a live chat as this family's episode (``FamilySpec.live``): the messages a client
sends after a served reply are that reply's next state, and tool calls in a reply become OpenAI ``tool_calls``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.conversation.signals import extract_signals
from claw_envs.core import Evaluative, NextState, step_history
from claw_envs.toolcall.actions import parse_action


class LiveChat:
    """The personal track's live-session adapter."""

    def next_state(
        self, new: Sequence[Mapping[str, Any]], before: Sequence[Mapping[str, Any]], action: str, step: int
    ) -> NextState:
        """The next state of a served turn: the messages the client sent after it (the user's reply, tool results);
        ``before`` is the chat up to and including the request the turn answered."""
        text = "\n\n".join(m["content"] for m in new)
        said = "\n\n".join(m["content"] for m in new if m["role"] == "user")
        signals = extract_signals(said) if said else None
        request = next((m["content"] for m in reversed(before) if m["role"] == "user"), "")
        return NextState(
            text=text,
            role="user" if said else "tool",
            step_index=step,
            evaluative=signals.evaluative if signals else Evaluative(),
            directive=signals.directive if signals else None,
            judge_inputs={
                "task": request,
                "history": step_history(before[:-1], last=6, task=True),
                "action": action,
                "result": text,
            },
        )

    def tool_calls(self, text: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
        """The reply's prose and its tool calls in OpenAI form (none: the whole text, ``[]``)."""
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
        parsed = parse_action(text, schemas)
        calls = [c for c in (item.to_openai() for item in parsed.items) if c is not None]
        return (parsed.text or None, calls) if calls else (text, [])
