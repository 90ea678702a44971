"""The personalization score, as in the reference paper: the mean rubric score of the policy's FIRST reply to
each held-out problem (distinct questions), asked in the persona's voice.

An extension of the generic evaluation (:mod:`claw_envs.evaluation`): episodes stop after one reply, so the
mean outcome is the personalization score; each record carries the rubric, and the summary adds the
valid-reply rate, answer correctness and each preference's pass rate (reported beside the score, never in it).
``--policy scripted:assistant`` / ``scripted:persona`` answer known problems in generic chat-assistant style or
in the persona's preferred style (no model); anything else gets a shrug with no number (score 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from claw_envs.conversation.demos import STYLES, render_reply
from claw_envs.conversation.persona import load_persona
from claw_envs.conversation.tasks import Problem
from claw_envs.episodes import EpisodeResult, first_messages, step_infos
from claw_envs.evaluation import Evaluation, ScriptedReply
from claw_envs.tasks import Task, TaskSource

SHRUG = "sorry, no idea which problem you mean."


class PersonalizationEvaluation(Evaluation):
    """Score = mean rubric score of the first reply; per-preference pass rates beside it."""

    score_name = "personalization score"
    success_name = "every preference met"

    def __init__(self, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        self.persona = load_persona(self.options.get("persona", "student"))  # an unknown persona fails here

    def env_kwargs(self) -> dict[str, Any]:
        return {"max_turns": 1}

    def select(self, tasks: TaskSource, n: int) -> list[Task]:
        """The first ``n`` tasks with distinct questions (procedural splits repeat some)."""
        seen: set[str] = set()
        chosen = []
        for task in tasks:
            if len(chosen) >= n:
                break
            question = str(task.data.get("question", task.id))
            if question not in seen:
                seen.add(question)
                chosen.append(task)
        return chosen

    def record(self, episode: EpisodeResult) -> dict[str, Any]:
        steps = step_infos(episode)
        if not steps:
            return {}
        info = steps[0]
        ns = info["next_state"]
        opening = first_messages(episode)
        return {
            "prompt": opening[-1]["content"] if opening else "",
            "reply": episode.actions[0] if episode.actions else "",
            **info["rubric"],
            "user_reply": ns.text,
            "evaluative": ns.evaluative.score,
            "directive": ns.directive,
        }

    def summary(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        rows = [r for r in records if "met" in r]
        if not rows:
            return {}
        names = list(rows[0]["met"])
        return {
            "persona": self.persona.name,
            "valid_rate": statistics.fmean(r["valid"] for r in rows),
            "correct_rate": statistics.fmean(r["correct"] for r in rows),
            "accepted_rate": statistics.fmean(r.get("accepted", False) for r in rows),
            "preference_rates": {k: statistics.fmean(r["met"][k] for r in rows) for k in names},
        }

    def rows(self, summary: Mapping[str, Any]) -> list[tuple[str, str]]:
        if "valid_rate" not in summary:
            return []
        out = [
            ("valid-reply rate", f"{summary['valid_rate']:.1%}"),
            ("answer correct", f"{summary['correct_rate']:.1%}"),
            ("accepted (all preferences and the right answer)", f"{summary['accepted_rate']:.1%}"),
        ]
        out += [(f"  preference: {k}", f"{v:.1%}") for k, v in summary["preference_rates"].items()]
        return out

    def scripted(self, name: str, tasks: Sequence[Task]) -> ScriptedReply:
        if name not in STYLES:
            raise ValueError(f"scripted policies here are {', '.join(f'scripted:{s}' for s in STYLES)}; not {name!r}")
        persona = self.persona
        problems = {p.question: p for p in (Problem.from_task(t) for t in tasks)}

        def reply(messages: Sequence[Mapping[str, Any]], seed: int) -> str:
            last = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
            found = [(last.rfind(q), p) for q, p in problems.items() if q in last]
            if not found:
                return SHRUG
            problem = max(found, key=lambda x: x[0])[1]
            return render_reply(persona, problem, name, np.random.default_rng(seed))

        return reply
