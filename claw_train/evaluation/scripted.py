"""Scripted policies for tests and demos: fixed-style replies to known problems, no model.

``--policy scripted:assistant`` answers every known problem in generic chat-assistant style (heading,
bold, step list); ``--policy scripted:persona`` answers in the persona's preferred style. A problem is
recognised by its question text appearing in the last user message; anything else gets a shrug with
no number (which scores 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from claw_envs.conversation import Persona, Problem, load_persona, render_reply
from claw_envs.conversation.demos import STYLES
from claw_envs.tasks import Task
from claw_train.policy.base import Completion, Message, Policy, PolicyError, SamplingParams

SHRUG = "sorry, no idea which problem you mean."


class ScriptedPolicy(Policy):
    """Replies in ``style`` (``assistant`` or ``persona``) to the problems in ``tasks``."""

    def __init__(self, style: str, persona: str | Persona = "student", tasks: Iterable[Task] = ()):
        if style not in STYLES:
            raise PolicyError(f"scripted policies are {', '.join(f'scripted:{s}' for s in STYLES)}; not {style!r}")
        self.style = style
        self.persona = load_persona(persona)
        self.problems = {p.question: p for p in (Problem.from_task(t) for t in tasks)}

    @classmethod
    def from_spec(cls, spec: str, persona: str | Persona, tasks: Iterable[Task]) -> ScriptedPolicy:
        """Build from a CLI string ``scripted:<style>``."""
        return cls(spec.removeprefix("scripted:"), persona, tasks)

    def _problem_in(self, text: str) -> Problem | None:
        found = [(text.rfind(q), p) for q, p in self.problems.items() if q in text]
        return max(found, key=lambda x: x[0])[1] if found else None

    async def generate(self, prompt: Sequence[Message] | Sequence[int], sampling: SamplingParams) -> Completion:
        if not prompt or not isinstance(prompt[0], dict):
            raise PolicyError("a scripted policy answers chat messages, not token ids")
        last = next((str(m.get("content") or "") for m in reversed(prompt) if m.get("role") == "user"), "")
        problem = self._problem_in(last)
        rng = np.random.default_rng(sampling.seed)
        text = SHRUG if problem is None else render_reply(self.persona, problem, self.style, rng)
        return Completion(text=text, token_ids=[], logprobs=[], finish_reason="stop", policy_version=self.version)
