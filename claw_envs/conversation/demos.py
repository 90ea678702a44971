"""Demonstration data: reference replies in two styles, and hint-conditioned pairs.

* ``assistant`` style — what a generic chat assistant writes: a heading, bold, a "Step 1:" list and a
  "Final Answer" line. It states the right number but misses almost every persona preference
  (rubric ≈ 0.17 for the student, 0.2 for the teacher).
* ``persona`` style — the persona's own preferred replies (``replies`` in its YAML file): rubric 1.0.
* hinted pairs — the same opening message with a hint appended as a bracketed note (exactly
  :func:`hinted_messages`) → a persona-style reply. The hint is the directive the signal extractor pulls
  from the simulated user's own complaint, as is or wrapped the way the rules judge words a hint
  (:func:`hint_forms`), so it is the text the trainer's OPD teacher will see.

Replies are short (about 60–200 characters) and the built-in homework easy, so a tiny byte-level model
can learn both styles and the switch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from claw_envs.conversation.persona import Persona, pick
from claw_envs.conversation.rubric import rubric
from claw_envs.conversation.signals import extract_signals
from claw_envs.conversation.tasks import Problem, StudentWork, builtin_tasks, fmt, problem_fields, student_work
from claw_envs.messages import hinted_messages
from claw_envs.tasks import TaskSource

Message = dict[str, Any]
STYLES = ("assistant", "persona")

_ASSISTANT = (
    "## Solution\n\n{step_lines}\n\n**Final Answer:** {answer}",
    "### Step-by-step solution\n{numbered}\n\n**Answer:** {answer}",
    "## Let's solve this step by step\n\n{bullets}\n\nTherefore, the **final answer is {answer}**.",
    "**Solution:**\n\n{step_lines}\n\n### Final Answer\n**{answer}**",
)


def _assistant_reply(problem: Problem, rng: np.random.Generator) -> str:
    steps = [str(s) for s in problem.steps[-3:]]
    if len(steps) < 2:
        setup = f"Set up the calculation: {problem.steps[0].expr}" if problem.steps else "Read the problem carefully"
        steps = [setup, *(steps or [f"Work out the result: {fmt(problem.answer)}"])]
    fields = {
        "answer": fmt(problem.answer),
        "step_lines": "\n".join(f"**Step {i}:** {s}" for i, s in enumerate(steps, 1)),
        "numbered": "\n".join(f"{i}. **{s}**" for i, s in enumerate(steps, 1)),
        "bullets": "\n".join(f"- **Step {i}:** {s}" for i, s in enumerate(steps, 1)),
    }
    return pick(_ASSISTANT, rng).format(**fields)


def render_reply(
    persona: Persona,
    problem: Problem,
    style: str,
    rng: np.random.Generator,
    work: StudentWork | None = None,
) -> str:
    """A reference reply to ``problem`` in ``style`` (``assistant`` or ``persona``)."""
    if style == "assistant":
        return _assistant_reply(problem, rng)
    if style != "persona":
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    if persona.kind == "grade":
        work = work or student_work(problem)
        templates = persona.replies["right" if work.correct else "wrong"]
    else:
        templates = persona.replies["default"]
    fields = problem_fields(problem, work)
    usable = []
    for t in templates:
        try:
            usable.append(t.format(**fields))
        except KeyError:
            continue
    if not usable:
        return f"so it's {fields['answer']}."
    fitting = [r for r in usable if rubric(persona, r, problem, work).score == 1.0] or usable
    return fitting[int(rng.integers(len(fitting)))]


def opening_message(persona: Persona, problem: Problem, rng: np.random.Generator, *, first: bool = True) -> str:
    """The user's message that poses ``problem`` (an opening, or a next-problem line after thanks)."""
    work = student_work(problem) if persona.kind == "grade" else None
    return pick(persona.opening if first else persona.next_problem, rng).format(**problem_fields(problem, work))


def hint_forms(directive: str) -> tuple[str, ...]:
    """The ways a hint built from ``directive`` reaches the policy: the directive itself, and the two
    "for next time" wrappings the rules judge (``judges.backends.rules.directive_to_hint``) puts around it."""
    text = " ".join(directive.split())
    return (text, f"Next time, {text[0].lower()}{text[1:]}", f"Keep this in mind next time: {text}")


def complaint_hint(persona: Persona, reply: str, problem: Problem, rng: np.random.Generator) -> str | None:
    """A hint from the user's complaint about ``reply``: its directive, in one of :func:`hint_forms`."""
    result = rubric(persona, reply, problem)
    missed = [p for p in persona.preferences if not result.met[p.name]]
    if not missed:
        return None
    complaint = pick(tuple(p.name for p in missed), rng)
    directive = extract_signals(persona.preference(complaint).phrasing.compose(rng)).directive
    return pick(hint_forms(directive), rng) if directive else None


def demonstrations(
    persona: Persona,
    n: int,
    seed: int = 0,
    *,
    tasks: TaskSource | None = None,
    persona_share: float = 0.05,
    hinted_share: float = 0.4,
) -> list[dict[str, Any]]:
    """``n`` demonstration rows ``{"messages", "completion", "style", "hinted", "hint", "persona"}`` on train problems.

    About ``hinted_share`` of the rows are hinted pairs (opening + bracketed hint → persona style), about
    ``persona_share`` unhinted persona-style replies, and the rest unhinted assistant-style replies —
    so a policy trained on them starts mostly in assistant style and switches style when hinted.
    """
    if not 0 <= persona_share + hinted_share <= 1:
        raise ValueError("persona_share + hinted_share must be within [0, 1]")
    tasks = tasks or builtin_tasks("train")
    rng = np.random.default_rng(seed)
    n_hinted, n_persona = round(n * hinted_share), round(n * persona_share)
    kinds = ["hinted"] * n_hinted + ["persona"] * n_persona + ["assistant"] * (n - n_hinted - n_persona)
    rng.shuffle(kinds)
    rows = []
    for kind in kinds:
        problem = Problem.from_task(tasks.sample(rng))
        messages = [{"role": "user", "content": opening_message(persona, problem, rng)}]
        hint = None
        if kind == "hinted":
            hint = complaint_hint(persona, render_reply(persona, problem, "assistant", rng), problem, rng)
            if hint:
                messages = hinted_messages(messages, hint)
        style = "assistant" if kind == "assistant" else "persona"
        rows.append(
            {
                "messages": messages,
                "completion": render_reply(persona, problem, style, rng),
                "style": style,
                "hinted": hint is not None,
                "hint": hint,
                "persona": persona.name,
            }
        )
    return rows
