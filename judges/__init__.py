"""Judges turn a next state into training signal: a PRM score and, optionally, an OPD hint.

``make_judge("rules" | "policy" | "openai://HOST:PORT", family=...)`` builds a :class:`StepJudge`;
``await judge.judge(action, next_state, messages)`` returns a :class:`Judgement`.
"""

from judges.base import HintResult, Judge, Judgement, Vote
from judges.factory import make_backend, make_judge
from judges.hint import HintJudge
from judges.metrics import JudgeMetrics
from judges.prm import PRMJudge
from judges.prompts import PromptError, render, templates_for
from judges.step import StepJudge

__all__ = [
    "HintJudge",
    "HintResult",
    "Judge",
    "JudgeMetrics",
    "Judgement",
    "PRMJudge",
    "PromptError",
    "StepJudge",
    "Vote",
    "make_backend",
    "make_judge",
    "render",
    "templates_for",
]
