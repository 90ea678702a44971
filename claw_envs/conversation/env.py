"""``claw/Conversation-v0``: a simulated user with hidden preferences asks for help with homework.

Episode: ``reset`` → the user's first message (a problem, in the persona's voice) is the observation.
Each ``step(reply)``: the simulator reacts to the reply; the user's message is the next state
(``role="user"``) and the next observation. Signals come from that message's text (thanks +1,
complaint or re-ask -1, the corrective sentence as directive). A satisfied user thanks and poses a
new problem in the same message; after ``persona.patience`` failed tries on one problem the user gives
up (still a complaint) and moves on too. Episodes run ``max_turns`` (8) replies, then truncate.

Reward (for plain Gymnasium users): the personalization rubric score in [0, 1] of the reply just
given, on the problem it answered. At the end, ``next_state.outcome`` is the mean of those scores.
``info`` also carries the rubric detail (``rubric``, ``answer_correct``, ``valid_reply``). A reply the policy's
generation cut off at its token limit (passed as :class:`~claw_envs.messages.CutOffText`) is not valid
(``invalid_kind="cut_off"``) and scores 0.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from claw_envs.conversation.demos import demonstrations, opening_message, render_reply
from claw_envs.conversation.persona import Persona, available_personas, load_persona, pick
from claw_envs.conversation.rubric import rubric
from claw_envs.conversation.score import MAX_REPLY_CHARS
from claw_envs.conversation.signals import extract_signals
from claw_envs.conversation.simulator import Simulator, Turn, make_simulator
from claw_envs.conversation.tasks import Problem, StudentWork, builtin_tasks, student_work
from claw_envs.core import ClawEnv, NextState, Opening, Transition
from claw_envs.messages import is_cut_off, step_history
from claw_envs.tasks import Task, TaskSource, TaskSourceLike


class ConversationEnv(ClawEnv):
    """Homework help for a simulated ``student`` or ``teacher`` (or any persona file); see the module docstring."""

    default_max_turns = 8

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        persona: str | Path | Persona = "student",
        simulator: str | Simulator = "rules",
        simulator_options: Mapping[str, Any] | None = None,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
    ):
        self.persona = load_persona(persona)
        self.simulator = make_simulator(simulator, simulator_options)
        super().__init__(tasks, split=split, max_turns=max_turns, render_mode=render_mode)
        self.problem: Problem | None = None
        self.work: StudentWork | None = None
        self.request = ""
        self.attempt = 0
        self.scores: list[float] = []

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        return builtin_tasks(split)

    def _pose(self, task: Task, *, first: bool) -> str:
        """Make ``task`` the current problem; returns the user's message that asks it."""
        self.problem = Problem.from_task(task)
        self.work = student_work(self.problem) if self.persona.kind == "grade" else None
        self.request = opening_message(self.persona, self.problem, self.np_random, first=first)
        self.attempt = 0
        return self.request

    async def _begin(self, task: Task) -> Opening:
        self.scores = []
        text = self._pose(task, first=True)
        info = {"persona": self.persona.name, "problem_id": self.problem.id}
        return Opening(observation=text, messages=[{"role": "user", "content": text}], info=info)

    async def _act(self, action: str) -> Transition:
        problem, request = self.problem, self.request
        self.attempt += 1
        result = rubric(self.persona, action, problem, self.work, cut_off=is_cut_off(action))
        self.scores.append(result.score)
        reply = action[:MAX_REPLY_CHARS]
        turn = Turn(
            persona=self.persona,
            problem=problem,
            work=self.work,
            request=request,
            reply=reply,
            reply_length=len(action),
            rubric=result,
            attempt=self.attempt,
            history=list(self.messages[:-1]),
        )
        reaction = await self.simulator.react(turn, self.np_random)
        said = reaction.text
        moved_on = reaction.satisfied or self.attempt >= self.persona.patience
        if moved_on and not reaction.satisfied:
            said = f"{said} {pick(self.persona.give_up, self.np_random)}"
        signals = extract_signals(said)
        text = f"{said}\n\n{self._pose(self.tasks.sample(self.np_random), first=False)}" if moved_on else said
        if len(action) > len(reply):
            reply += f"\n[... cut: {len(action) - len(reply)} more characters]"
        ns = NextState(
            text=text,
            role="user",
            evaluative=signals.evaluative,
            directive=signals.directive,
            judge_inputs={
                "task": request,
                "history": step_history(self.messages[:-1], last=6, task=True),
                "action": reply,
                "result": text,
            },
        )
        info = {
            "persona": self.persona.name,
            "problem_id": problem.id,
            "next_problem_id": self.problem.id,
            "rubric": result.to_dict(),
            "answer_correct": result.correct,
            "valid_reply": result.valid,
            "reaction": signals.kind,
            "satisfied": reaction.satisfied,
            "moved_on": moved_on,
        }
        return Transition(observation=text, next_state=ns, reward=result.score, info=info)

    def _final_outcome(self) -> float | None:
        return float(np.mean(self.scores)) if self.scores else None

    def reference_action(self) -> str | None:
        """A reply in the persona's preferred style to the current problem (deterministic)."""
        if self.problem is None:
            return None
        rng = np.random.default_rng([zlib.crc32(self.problem.id.encode()), self.attempt])
        return render_reply(self.persona, self.problem, "persona", rng, self.work)

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """Demonstrations on train problems (:func:`claw_envs.conversation.demos.demonstrations`): half for this
        env's persona, the rest shared among the other built-in personas, so a model bootstrapped on them follows
        any built-in persona's hints (the way an instruction-tuned model would)."""
        tasks = self.tasks if self.tasks.split == "train" else None
        others = [load_persona(name) for name in available_personas() if name != self.persona.name]
        own = n - n // 2 if others else n
        rest = np.array_split(np.arange(n - own), len(others)) if others else []
        shares = [own, *(len(part) for part in rest)]
        rows = [
            row
            for i, (persona, k) in enumerate(zip([self.persona, *others], shares, strict=True))
            for row in demonstrations(persona, k, seed + i, tasks=tasks)
        ]
        np.random.default_rng(seed).shuffle(rows)
        return rows

    async def aclose(self) -> None:
        await self.simulator.aclose()
