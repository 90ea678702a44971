"""The personalization rubric: how well ONE reply meets a persona's hidden preferences.

``rubric(persona, reply, problem).score`` is the fraction of the persona's preferences the reply
meets, in [0, 1]. The first preference is always ``well_formed`` — a valid natural-language reply
that states a final number — and every other preference only counts as met on a well-formed reply,
so junk, empty text or a dodge ("idk lol") scores 0 however little bold it has. Whether the final
number is right (``answer_correct``) and whether the reply is valid at all (``is_valid_reply``) are
reported beside the score, never mixed into it. The checks themselves are in :mod:`.score`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from claw_envs.conversation.persona import Persona
from claw_envs.conversation.score import CHECKS, answer_correct, context, final_number, reply_problem
from claw_envs.conversation.tasks import Problem, StudentWork, student_work


@dataclass(frozen=True)
class RubricResult:
    """One reply scored for one persona.

    ``met`` holds what counts (a style preference is met only on a well-formed reply); ``raw`` holds
    each check's plain verdict (empty for a reply too long to read). ``score = mean(met)``.
    """

    score: float
    met: Mapping[str, bool]
    raw: Mapping[str, bool]
    valid: bool
    invalid_kind: str | None
    final: float | None
    correct: bool

    @property
    def accepted(self) -> bool:
        """What the user would accept: every preference met and the right answer."""
        return self.score == 1.0 and self.correct

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready values (without ``raw``)."""
        return {
            "score": self.score,
            "met": dict(self.met),
            "valid": self.valid,
            "invalid_kind": self.invalid_kind,
            "final": self.final,
            "correct": self.correct,
            "accepted": self.accepted,
        }


def rubric(
    persona: Persona, reply: str, problem: Problem, work: StudentWork | None = None, *, cut_off: bool = False
) -> RubricResult:
    """Score ``reply`` to ``problem`` against ``persona``'s preferences (see the module docstring).

    ``cut_off``: the generation stopped at its token limit (finish reason ``length``), so the reply is unfinished:
    it is not valid (``invalid_kind="cut_off"``, unless already ``too_long``) and meets nothing.
    """
    kind = reply_problem(reply)
    if cut_off and kind != "too_long":
        kind = "cut_off"
    if work is None and persona.kind == "grade":
        work = student_work(problem)
    raw: dict[str, bool] = {}
    if kind != "too_long":
        ctx = context(reply, problem, work)
        raw = {p.name: bool(CHECKS[p.check](ctx, **p.params)) for p in persona.preferences}
    well_formed = kind is None and raw.get("well_formed", False)
    met = {p.name: well_formed and raw.get(p.name, False) for p in persona.preferences}
    final = final_number(reply, problem.question) if kind is None else None
    correct = final is not None and answer_correct(reply, problem.answer, problem.question)
    return RubricResult(
        score=sum(met.values()) / len(met),
        met=met,
        raw=raw,
        valid=kind is None,
        invalid_kind=kind,
        final=final,
        correct=correct,
    )
