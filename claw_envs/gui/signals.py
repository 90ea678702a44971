"""Score a GUI step and say what the agent sees next.

Scores: **-1** when the action could not be read, targeted nothing (an unknown id, an element that never became
clickable, a point off the screen, a blocked address) or **changed nothing** on the screen; **0** when the page or
app answered with a message to the user (a validation error such as "Wrong password") — the message becomes the
``directive``; **+0.5** when the screen changed and nothing went wrong (whether that was progress is for the
outcome and a model judge to say). Waiting, messages to the user and a screenshot request are never "changed
nothing". At ``DONE``/``FAIL`` or the step limit the task's check decides: +1 and outcome 1.0 when the app's
state is as asked, else -1 and outcome 0.0 with a directive naming what is not as asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from claw_envs.core import Evaluative
from claw_envs.gui.ops import ActionError
from claw_envs.gui.screen import Screen

CHANGED_SCORE = 0.5
PASSIVE_OPS = frozenset({"wait", "send_msg_to_user", "done", "fail"})


@dataclass(frozen=True)
class StepSignal:
    """The evaluative score and directive of one step, and the error line shown to the agent (if any)."""

    evaluative: Evaluative
    directive: str | None
    error: str | None


def screen_text(screen: Screen, *, error: str | None = None, messages: Sequence[str] = ()) -> str:
    """What a text policy reads: the window's title and address, the tree, then the error and page messages."""
    head = f"Title: {screen.title}" + (f"\nURL: {screen.url}" if screen.url else "")
    parts = [head, screen.tree or "(the screen has no elements)"]
    if error:
        parts.append(f"Last action error: {error}")
    for message in messages:
        parts.append(f"Message from the app: {message}")
    return "\n".join(parts)


def step_signal(
    *, error: ActionError | None, changed: bool, passive: bool, messages: Sequence[str], blocked: Sequence[str]
) -> StepSignal:
    """The signal of a step that did not end the episode (see the module docstring)."""
    if blocked:
        shown = ", ".join(blocked[:3]) + (" …" if len(blocked) > 3 else "")
        error = error or ActionError(
            f"blocked requests to {shown}: only the task's own pages can be reached", "blocked"
        )
    if error is not None:
        return StepSignal(Evaluative(-1.0, (error.tag,)), _directive_for(error), str(error))
    if messages:
        return StepSignal(Evaluative(0.0, ("app_message",)), " ".join(messages), None)
    if not changed and not passive:
        directive = (
            "The action changed nothing on the screen: pick an element id from the tree that does what the task "
            "needs, or check that the text went into the right field."
        )
        return StepSignal(Evaluative(-1.0, ("no_change",)), directive, "the action changed nothing on the screen")
    if passive:
        return StepSignal(Evaluative(0.0, ("passive",)), None, None)
    return StepSignal(Evaluative(CHANGED_SCORE, ("changed",)), None, None)


def _directive_for(error: ActionError) -> str:
    hints = {
        "unsafe_code": "Write only the allowed calls with literal arguments, e.g. click('12') or "
        "pyautogui.click(100, 200); nothing else is run.",
        "no_target": "Use an id that appears in square brackets in the current tree.",
        "failed_on_target": "That element cannot take this action now (hidden, disabled or covered); pick another.",
        "off_screen": "Use coordinates inside the screenshot.",
        "blocked": "Only the task's own pages can be opened; stay on the app.",
        "too_long": "Shorten the action.",
    }
    first = str(error)
    hint = hints.get(error.tag, "Write one action, e.g. click('12') or DONE.")
    return f"{first[0].upper()}{first[1:]}. {hint}"


def verdict(missing: Sequence[str], *, solved: bool | None = None, reason: str = "") -> tuple[Evaluative, str | None]:
    """Score and directive at the end of an episode; ``missing`` are the checked keys that are not as asked."""
    done = not missing if solved is None else solved
    if done:
        return Evaluative(1.0, ("task=1/1",)), None
    what = f" ({', '.join(missing)} not as asked)" if missing else ""
    detail = f" {reason}" if reason else ""
    directive = f"The task was not done when the episode ended{what}.{detail} Compare the screen with the instruction."
    return Evaluative(-1.0, ("task=0/1",)), directive
