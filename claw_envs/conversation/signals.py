"""Next-state signals read from the USER'S REPLY TEXT (never from the hidden rubric).

* thanks / praise, with no complaint or re-ask → evaluative **+1** (tag ``user_thanks``)
* complaint or correction ("don't bold things", "too long", an instruction) → **-1** (``user_complaint``)
* re-ask (answer missing or wrong, "check it again", "what's the answer?") → :data:`REASK_SCORE` = **-1**
  (``user_reask``): the user had to ask again, so the reply failed
* anything else → 0 (``user_neutral``)

The ``directive`` is the corrective sentence — the first sentence phrased as an instruction ("Write it
without bold.", "Can you check the math?") — present only when the evaluative is negative. The same
functions serve the simulated users here and live conversations behind ``claw-serve``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from claw_envs.core import Evaluative

REASK_SCORE = -1.0

_THANKS = re.compile(
    r"\b(?:thanks|thank (?:you|u)|thx|ty|perfect|awesome|that helps|helpful|love (?:it|this)|lovely|"
    r"exactly what i (?:needed|wanted))\b",
    re.I,
)
_REASK = re.compile(
    r"(?:what['’]?s|what is) the (?:actual |final |real |right )?(?:answer|number)|"
    r"\bdidn['’]?t (?:actually )?(?:answer|say|write|give|tell)|\byou never (?:said|told|gave|answered)|"
    r"\bcheck (?:it|that|this|the math|your math|the numbers)\b|\btry again\b|\bredo\b|"
    r"\b(?:not|isn['’]?t) (?:right|correct|what)\b|\bwrong\b|\bdon['’]?t think (?:that|it)['’]?s right\b|"
    r"\bdoesn['’]?t (?:match|add up|look right|make sense)|\banswer key\b|\bcan['’]?t read\b|\bin english\b|"
    r"\bblank\b|\bjust a number\b",
    re.I,
)
_COMPLAINT = re.compile(
    r"\b(?:don['’]?t|do not|stop|no more|too (?:long|formal|wordy|much|stiff|cold|generic|robotic|vague)|"
    r"looks? like (?:a )?(?:bot|robot|ai|chatgpt)|bot wrote|robotic|nobody (?:writes|talks)|no student|"
    r"instead|next time|ugh|why (?:is|are|does|did))\b",
    re.I,
)
_DIRECTIVE = re.compile(
    r"^(?:(?:ok|okay|so|and|but|please|pls|just|now|also|oh)[,\s]+)*"
    r"(?:don['’]?t|do not|never|stop|write|keep|use|make|drop|skip|say|put|add|tell|check|try|answer|be|cut|"
    r"give|name|point|show|mention|redo|explain|fix|lose|leave|include|start|end|only|sound|talk|state|"
    r"could you|can you|next time|no more)\b",
    re.I,
)

_CLAUSE = re.compile(r"[,;:]\s*|\s(?:but|and)\s+", re.I)
_LEADING_CONJUNCTION = re.compile(r"^(?:(?:and|but|so|oh)[,\s]+)+", re.I)


@dataclass(frozen=True)
class Signals:
    """What the user's reply says about the agent's last reply."""

    evaluative: Evaluative
    directive: str | None
    kind: str  # "thanks" | "complaint" | "reask" | "neutral"


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (and lines)."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def corrective_sentence(text: str) -> str | None:
    """The first sentence of ``text`` phrased as an instruction, else the first such clause
    ("thanks, but please don't use bold." → "please don't use bold."), else ``None``."""
    parts = sentences(text)
    whole = next((s for s in parts if _DIRECTIVE.match(s)), None)
    if whole is not None:
        return whole
    for s in parts:
        for cut in _CLAUSE.finditer(s):
            clause = _LEADING_CONJUNCTION.sub("", s[cut.end() :])
            if _DIRECTIVE.match(clause):
                return clause
    return None


def extract_signals(text: str) -> Signals:
    """Evaluative score, tags and directive from a user's reply (see the module docstring)."""
    directive = corrective_sentence(text)
    thanks = bool(_THANKS.search(text))
    reask = bool(_REASK.search(text))
    complaint = bool(_COMPLAINT.search(text)) or (directive is not None and not thanks)
    if reask:
        kind, score = "reask", REASK_SCORE
    elif complaint:
        kind, score = "complaint", -1.0
    elif thanks:
        kind, score = "thanks", 1.0
    else:
        kind, score = "neutral", 0.0
    tags = tuple(f"user_{k}" for k, hit in (("reask", reask), ("complaint", complaint)) if hit) or (f"user_{kind}",)
    return Signals(Evaluative(score, tags), directive if score < 0 else None, kind)
