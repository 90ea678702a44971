"""How ``claw-serve`` reads a live chat as this family's episode (``FamilySpec.live``): the messages a client
sends after a served reply are that reply's next state, and tool calls in a reply become OpenAI ``tool_calls``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.conversation.score import CHECKS, context
from claw_envs.conversation.signals import extract_signals
from claw_envs.core import Evaluative, NextState
from claw_envs.messages import step_history
from claw_envs.tool_calls.parse import parse_action

HINT_CHECKS = (
    (re.compile(r"\bbold", re.I), "no_bold"),
    (re.compile(r"\bhead(?:er|ing)s?\b|\btitles?\b", re.I), "no_headers"),
    (re.compile(r"\bsteps?\b|\bnumber(?:ed)?\b|\blists?\b|\bbullets?\b", re.I), "no_step_list"),
    (re.compile(r"\bshort(?:er)?\b|\btoo long\b|\bbrief(?:er)?\b|\bshorten\b", re.I), "short"),
    (re.compile(r"\bcasual\b|\bformal\b|\brobot|\blike a (?:normal |real )?(?:kid|student|person)\b", re.I), "casual"),
)
"""Which rubric check an instruction asks for, by its words ("don't use bold" -> ``no_bold``)."""


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

    def hint_check(self, hint: str, reply: str, request: str) -> NextState:
        """A reply to ``request`` against an instruction the same user gave earlier, as a next state a judge scores:
        ``evaluative`` is this family's own reading (+1 kept, -1 broken, 0 when the instruction names none of its
        checks: bold, headings, step lists, length, a casual voice), which the rules judge takes; model judges read
        ``judge_inputs`` (template ``prm_hint_check``)."""
        names = [name for pattern, name in HINT_CHECKS if pattern.search(hint)]
        kept = [CHECKS[name](context(reply, None)) for name in names]  # these checks read the reply only
        score = 0.0 if not kept else 1.0 if all(kept) else -1.0
        tags = tuple(f"{name}={'kept' if ok else 'broken'}" for name, ok in zip(names, kept, strict=True))
        return NextState(
            text="",
            role="user",
            evaluative=Evaluative(score, tags or ("hint_not_checkable",)),
            judge_inputs={"task": request, "action": reply, "result": hint},
        )

    def tool_calls(self, text: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
        """The reply's prose and its tool calls in OpenAI form (none: the whole text, ``[]``)."""
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
        parsed = parse_action(text, schemas)
        calls = [c for c in (item.to_openai() for item in parsed.items) if c is not None]
        return (parsed.text or None, calls) if calls else (text, [])
