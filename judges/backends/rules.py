"""A deterministic judge that needs no model: it reads the env-native signals of a next state.

Score: the sign of ``next_state.evaluative.score``; when that is 0, patterns in the reply (thanks vs.
re-ask / correction / error text); failing those, a ``directive`` (the env saying what to change) counts
against the action unless the family's spec says a directive may accompany a fine move
(``JudgeTemplates.directive_is_negative``). Hint: the ``directive`` turned into an instruction for next time.
The answers are written in the same format a model judge uses (``\\boxed{…}``, ``[HINT_START]…``), so
they go through the same parsing, voting and logging.
"""

from __future__ import annotations

import re

from claw_envs.core import NextState
from judges.backends.base import JudgeBackend, JudgeRequest
from judges.metrics import JudgeMetrics
from judges.parse import HINT_END, HINT_START

MAX_HINT_CHARS = 600

NEGATIVE_PATTERNS: dict[str, re.Pattern[str]] = {
    "error": re.compile(
        r"traceback \(most recent call last\)|\b\w*(?:error|exception)\b:|command not found"
        r"|no such file or directory|permission denied|segmentation fault|(?<!\b0 )\bfailed\b|\ban error\b"
        r"|returncode=[1-9]|exit (?:code|status) [1-9]",
        re.IGNORECASE,
    ),
    "re-ask": re.compile(
        r"\b(?:i (?:already )?(?:asked|said|meant)|that'?s not what i|not what i (?:asked|wanted|meant)"
        r"|you (?:didn'?t|did not|forgot|missed|ignored)|try again|once more|still (?:wrong|not|don'?t|doesn'?t)"
        r"|please (?:answer|redo|fix)|answer the question|again\?)",
        re.IGNORECASE,
    ),
    "correction": re.compile(
        r"\b(?:wrong|incorrect|not (?:right|correct)|that'?s a mistake|mistaken"
        r"|(?:don'?t|do not|stop) (?!worry|mind)\w+|no,|nope|actually,)",
        re.IGNORECASE,
    ),
}
POSITIVE_PATTERN = re.compile(
    r"\b(?:thanks?|thank you|thx|perfect|great|awesome|that works|that helped|well done|nice|correct)\b",
    re.IGNORECASE,
)
IMPERATIVE_STARTS = frozenset(
    {
        *("add", "always", "answer", "avoid", "be", "call", "change", "check", "cite", "do", "don't", "end"),
        *("explain", "fix", "give", "include", "keep", "leave", "list", "make", "mention", "never", "please"),
        *("put", "read", "remove", "repeat", "reply", "respond", "return", "run", "say", "send", "show", "start"),
        *("state", "stop", "try", "use", "verify", "write"),
    }
)


def rule_score(next_state: NextState, *, directive_is_negative: bool = True) -> tuple[int, str]:
    """A score in {-1, 0, 1} and the reason for it, from the env's own signal or, failing that, the text."""
    score = next_state.evaluative.score
    tags = ", ".join(next_state.evaluative.tags)
    if score > 0:
        return 1, f"the environment rated the step positive ({tags or score})"
    if score < 0:
        return -1, f"the environment rated the step negative ({tags or score})"
    text = next_state.text or ""
    for name, pattern in NEGATIVE_PATTERNS.items():
        match = pattern.search(text)
        if match:
            return -1, f"the reply reads as {name} ({match.group(0)!r})"
    match = POSITIVE_PATTERN.search(text)
    if match:
        return 1, f"the reply reads as approval ({match.group(0)!r})"
    if directive_is_negative and next_state.directive and next_state.directive.strip():
        return -1, "the environment said what the action should have done differently"
    return 0, "the reply carries no clear signal either way"


def directive_to_hint(directive: str | None) -> str | None:
    """The directive as an instruction for the next attempt, or ``None`` when there is nothing to say."""
    if directive is None:
        return None
    text = " ".join(directive.split())
    if not text:
        return None
    if len(text) > MAX_HINT_CHARS:
        text = text[: MAX_HINT_CHARS - 3].rstrip() + "..."
    if text[-1] not in ".!?":
        text += "."
    first = text.split(maxsplit=1)[0].lower().strip(",:;")
    if first in IMPERATIVE_STARTS:
        return f"Next time, {text[0].lower()}{text[1:]}"
    return f"Keep this in mind next time: {text}"


class RulesBackend(JudgeBackend):
    """Deterministic: every vote of a step gives the same answer. Never fails, never calls a model."""

    name = "rules"
    uses_prompt = False

    def __init__(self, metrics: JudgeMetrics | None = None, *, directive_is_negative: bool = True):
        super().__init__(metrics)
        self.directive_is_negative = directive_is_negative

    @property
    def worst_case_seconds(self) -> float:
        return 5.0

    async def complete(self, request: JudgeRequest) -> str:
        """A verdict read from the next state's own signals, in the format a judge model would write."""
        self.metrics.inc("requests")
        ns = request.next_state
        if request.kind == "prm":
            score, reason = rule_score(ns, directive_is_negative=self.directive_is_negative)
            return f"Rule judge: {reason}.\n\\boxed{{{score}}}"
        hint = directive_to_hint(ns.directive)
        if hint is None:
            return "Rule judge: the next state carries no directive, so there is nothing to learn here.\n\\boxed{-1}"
        return f"Rule judge: the next state says how to do better.\n{HINT_START}{hint}{HINT_END}\n\\boxed{{1}}"
