"""``claw/GUI-v0``: operate a real screen — a headless Chromium page or an Xvfb desktop — to reach a goal.

Each turn the agent writes one action (:mod:`.actions`: an element action over the tree's ids such as
``click('12')``, pyautogui code such as ``pyautogui.click(300, 200)``, or a ``computer`` tool call), or ``DONE``
when the task is finished (``FAIL`` when it cannot be). Actions are parsed against a whitelist, never run as
Python; the backend (:mod:`.browser` or :mod:`.desktop`, chosen by the task) carries them out.

Observation (a dict): ``screenshot`` (uint8, height x width x 3), ``a11y`` (the accessibility tree, one
``[id] role "name"`` line per element), ``url``, ``title`` (the window's title on the desktop) and ``error``
(what went wrong with the last action, or empty). Text policies read the same as chat messages.

Step signals (``info["next_state"]``, see :mod:`.signals`): ``role="environment"``, the text is the new screen
(title, URL, tree, error, app messages), ``image`` the new screenshot (PNG); ``evaluative`` -1 for an action that
could not be read, targeted nothing or changed nothing, 0 with the app's message as ``directive``, +0.5 for a
change; at ``DONE``/``FAIL`` or the step limit (the task's ``max_steps``, 15) the task's check reads the app's
real state: ``outcome`` 1.0/0.0, ``reward`` the same. ``info["messages_to_user"]`` lists what the agent said with
``send_msg_to_user``. MiniWoB++ pages end the episode themselves when their
``WOB_DONE_GLOBAL`` is set. ``judge_inputs``: task, history, action, result (the tree after the action) and the
screenshots before and after (``image_before``, ``image_after``). A page that hangs or a renderer that crashes is
``info["status"] == "browser_failure"``; the next episode starts clean.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from claw_envs.core import (
    ClawEnv,
    Evaluative,
    InfraFailure,
    Message,
    NextState,
    Opening,
    Transition,
    UnicodeText,
)
from claw_envs.demos import draw, record_until
from claw_envs.gui.actions import parse
from claw_envs.gui.miniwob import PageResult, episode_result, start_episode
from claw_envs.gui.ops import ActionError, Op, ParsedAction
from claw_envs.gui.screen import Screen
from claw_envs.gui.signals import PASSIVE_OPS, StepSignal, screen_text, step_signal, verdict
from claw_envs.gui.tasks import APPS, DEFAULT_MAX_STEPS, builtin_tasks, check, resolve_step
from claw_envs.messages import step_history
from claw_envs.tasks import Task, TaskSource, TaskSourceLike

SYSTEM_PROMPT = """\
You operate a screen to do a task. Each turn you see the screen as a tree: one element per line, \
[id] role "name" and its state. Reply with ONE action:
click('12')  fill('12', 'text')  press('12', 'Enter')  select_option('12', 'Option')  hover('12')  scroll(0, 300)
or pyautogui code with screen coordinates: pyautogui.click(300, 200), pyautogui.typewrite('text'), \
pyautogui.press('enter'), pyautogui.dragTo(400, 300).
When the task is finished reply DONE (FAIL if it cannot be done). You have {steps} steps."""


class GUIEnv(ClawEnv):
    """GUI tasks on a real browser or desktop; see the module docstring for observations and signals.

    ``tasks`` may be a folder of MiniWoB++-style pages (:mod:`.miniwob`) instead of the built-in tasks (each task
    names its backend, ``browser`` or ``desktop``); ``viewport`` is the screen size; ``step_timeout`` the deadline
    of any one browser or desktop call (past it the page counts as hung: ``browser_failure``).
    """

    default_max_turns = DEFAULT_MAX_STEPS

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
        viewport: tuple[int, int] = (800, 600),
        step_timeout: float = 20.0,
    ):
        super().__init__(tasks, split=split, max_turns=max_turns, render_mode=render_mode)
        self._fixed_max_turns = max_turns
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self.step_timeout = step_timeout
        width, height = self.viewport
        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (height, width, 3), dtype="uint8"),
                "a11y": UnicodeText(),
                "url": UnicodeText(),
                "title": UnicodeText(),
                "error": UnicodeText(),
            }
        )
        self._backends: dict[str, Any] = {}
        self._backend: Any = None
        self._screen: Screen | None = None
        self._instruction = ""
        self._sent: list[str] = []
        self._oracle_done = 0
        self._oracle_next: str | None = None

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        return builtin_tasks(split)

    # -- backends --------------------------------------------------------------------------------------

    def _backend_for(self, kind: str) -> Any:
        if kind not in self._backends:
            if kind == "browser":
                from claw_envs.gui.browser import BrowserBackend

                self._backends[kind] = BrowserBackend(self.viewport, timeout=self.step_timeout)
            elif kind == "desktop":
                from claw_envs.gui.desktop import DesktopBackend

                self._backends[kind] = DesktopBackend(self.viewport, timeout=self.step_timeout)
            else:
                raise ValueError(f"unknown GUI backend {kind!r} (browser or desktop)")
        return self._backends[kind]

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()
        self._backends.clear()
        self._backend = None

    # -- episode ---------------------------------------------------------------------------------------

    def opening_messages(self, instruction: str, screen: Screen) -> list[Message]:
        """The system prompt (the action forms) and the task with the first screen."""
        system = SYSTEM_PROMPT.format(steps=self.max_turns)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Task: {instruction}\n\n{screen_text(screen)}"},
        ]

    async def _begin(self, task: Task) -> Opening:
        kind = str(task.data.get("backend", "browser"))
        backend = self._backend_for(kind)
        if self._backend is not None and self._backend is not backend:
            await self._backend.end_episode()
        self._backend = backend
        self.max_turns = self._fixed_max_turns or int(task.data.get("max_steps", DEFAULT_MAX_STEPS))
        self._sent = []
        self._oracle_done = 0
        self._oracle_next = None
        if "miniwob" in task.data:
            self._instruction = await start_episode(backend, task, int(self.np_random.integers(2**31 - 1)))
        else:
            await self._open_app(backend, task)
            self._instruction = str(task.data["instruction"])
        self._screen = await backend.observe()
        messages = self.opening_messages(self._instruction, self._screen)
        return Opening(self._observation(self._screen, ""), messages, {"instruction": self._instruction})

    async def _open_app(self, backend: Any, task: Task) -> None:
        if backend.kind == "desktop":
            await backend.open(str(task.data["app"]))
            return
        from claw_envs.gui.server import serve

        query = str(task.data.get("query") or "")
        url = serve(Path(str(APPS))) + str(task.data["app"]) + (f"?{query}" if query else "")
        await backend.open(url)

    async def _act(self, action: str) -> Transition:
        before = self._require_screen()
        try:
            parsed = parse(action)
        except ActionError as err:  # nothing was done: the screen is as before
            tr = self._transition(action, before, before, step_signal(error=err, changed=False, passive=False,
                                                                      messages=(), blocked=()), ())  # fmt: skip
            tr.next_state = dataclasses.replace(tr.next_state, action_taken=False)
        else:
            if parsed.ends_episode:
                return await self._finish(action, before, gave_up=any(op.name == "fail" for op in parsed.ops))
            tr = await self._carry_out(action, parsed, before)
            scored = tr.next_state.evaluative
            moved = all(op.name in ("mouse_move", "hover", "focus") for op in parsed.ops)
            changed = self._require_screen().fingerprint != before.fingerprint  # a click past its deadline may land
            if action == self._oracle_next and (
                scored.score > -1 or changed or (moved and scored.tags == ("no_change",))
            ):
                self._oracle_done += 1  # the oracle's step took effect (a pointer move may show nothing)
            if "miniwob" in self.task.data:
                result = await episode_result(self._backend)
                if result is not None:
                    return self._ended(tr, result)
        if self.step_index >= self.max_turns:  # the base class truncates here: the check decides the outcome
            solved, missing, reason = await self._check()
            evaluative, _ = verdict(missing, solved=solved, reason=reason)
            ns = tr.next_state
            scored = Evaluative(ns.evaluative.score, (*ns.evaluative.tags, *evaluative.tags))
            tr.next_state = dataclasses.replace(ns, evaluative=scored, outcome=float(solved))
            tr.reward = float(solved)
        return tr

    async def _carry_out(self, action: str, parsed: ParsedAction, before: Screen) -> Transition:
        """Perform the ops, then look at the screen: what changed, what the app said, what was blocked."""
        error = await self._perform(parsed.ops, before)
        after = await self._backend.observe()  # first: a request the action started is refused while it looks
        blocked = self._backend.take_blocked()
        messages = list(after.messages)
        self._screen = after
        signal = step_signal(
            error=error,
            changed=after.fingerprint != before.fingerprint,
            passive=all(op.name in PASSIVE_OPS for op in parsed.ops),
            messages=messages,
            blocked=blocked,
        )
        return self._transition(action, before, after, signal, messages)

    def _transition(
        self, action: str, before: Screen, after: Screen, signal: StepSignal, messages: Sequence[str]
    ) -> Transition:
        ns = NextState(
            text=screen_text(after, error=signal.error, messages=messages),
            evaluative=signal.evaluative,
            directive=signal.directive,
            image=after.png,
            judge_inputs=self._judge_inputs(action, before, after),
        )
        info = {"messages_to_user": list(self._sent)}  # what the agent said with send_msg_to_user, in order
        return Transition(observation=self._observation(after, signal.error or ""), next_state=ns, info=info)

    async def _perform(self, ops: tuple[Op, ...], screen: Screen) -> ActionError | None:
        for op in ops:
            if op.name == "send_msg_to_user":
                self._sent.append(str(op.args["text"]))
                continue
            try:
                await self._backend.perform(op, screen)
            except ActionError as err:
                return err
        return None

    async def _finish(self, action: str, before: Screen, *, gave_up: bool) -> Transition:
        solved, missing, reason = await self._check()
        evaluative, directive = verdict(missing, solved=solved, reason=reason)
        word = "FAIL" if gave_up else "DONE"
        text = f"{word}: the task is {'done' if solved else 'not done'}." + (f"\n{directive}" if directive else "")
        ns = NextState(
            text=text,
            evaluative=evaluative,
            directive=directive,
            outcome=float(solved),
            image=before.png,
            judge_inputs=self._judge_inputs(action, before, before, result=text),
        )
        await self._backend.end_episode()
        return Transition(self._observation(before, ""), ns, reward=float(solved), terminated=True)

    def _ended(self, tr: Transition, result: PageResult) -> Transition:
        """The step on which a MiniWoB page ended its episode: its raw reward decides."""
        evaluative, directive = verdict([], solved=result.solved, reason=result.reason)
        ns = dataclasses.replace(
            tr.next_state, evaluative=evaluative, directive=directive or tr.next_state.directive,
            outcome=float(result.solved),
        )  # fmt: skip
        info = {**tr.info, "reason": result.reason, "miniwob": result.info()}
        return Transition(tr.observation, ns, reward=float(result.solved), terminated=True, info=info)

    async def _check(self) -> tuple[bool, list[str], str]:
        """Whether the app's real state is as the task asks: (solved, keys not as asked, the page's reason)."""
        if "miniwob" in self.task.data:
            result = await episode_result(self._backend)
            if result is None:
                return False, [], "the page's episode is not over"
            return result.solved, [], result.reason
        missing = check(dict(self.task.data["expect"]), await self._backend.app_state())
        return not missing, missing, ""

    # -- observation and judge inputs ------------------------------------------------------------------

    def _require_screen(self) -> Screen:
        if self._screen is None:
            raise InfraFailure("the episode has no screen yet")
        return self._screen

    def _observation(self, screen: Screen, error: str) -> dict[str, Any]:
        image = screen.array.copy()  # every observation owns its pixels
        if image.shape != self.observation_space["screenshot"].shape:
            raise InfraFailure(
                f"the screenshot is {image.shape}, expected {self.observation_space['screenshot'].shape}"
            )
        return {"screenshot": image, "a11y": screen.tree, "url": screen.url, "title": screen.title, "error": error}

    def _failure_observation(self, message: str) -> Any:
        width, height = self.viewport
        blank = np.zeros((height, width, 3), dtype=np.uint8)
        return {"screenshot": blank, "a11y": "", "url": "", "title": "", "error": f"[infrastructure failure] {message}"}

    def _judge_inputs(self, action: str, before: Screen, after: Screen, result: str | None = None) -> dict[str, Any]:
        """What ``prompts/prm_gui.jinja`` needs, plus both screenshots for a judge that compares them."""
        return {
            "task": self._instruction,
            "history": step_history(self.messages[:-1]),
            "action": action,
            "result": result if result is not None else after.tree,
            "image_before": before.png,
            "image_after": after.png,
        }

    # -- scripted agents -------------------------------------------------------------------------------

    def reference_action(self) -> str | None:
        """The task's next oracle step, its element slots filled from the current screen, then ``DONE``.

        The script moves on only when its previous step took effect (the screen changed, or the step only moved the
        pointer and raised no error), so other actions in between (a junk step, a human's move) do not make it skip
        a step, a click that missed on a busy machine is tried again, and one that landed but overran its deadline
        (an error, yet the screen changed) is not."""
        if self.task is None or self._screen is None:
            return None
        oracle = list(self.task.data.get("oracle") or [])
        if not oracle:
            return None
        if self._oracle_done < len(oracle):
            self._oracle_next = resolve_step(oracle[self._oracle_done], self._screen)
            return self._oracle_next
        return "DONE"

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """The oracle's turns on the built-in training tasks, from real runs on this env's screens (each screen in
        the history is the one the oracle saw): the tasks are played in order until there are ``n`` turns, and
        ``n`` are drawn from them."""
        return draw(_oracle_rows(type(self), self.viewport, self.step_timeout, n), n, seed)

    def null_action(self) -> str | None:
        """Say ``DONE`` without doing anything."""
        return "DONE"


@functools.cache
def _oracle_rows(env_class: type[GUIEnv], viewport: tuple[int, int], step_timeout: float, n: int) -> tuple[Any, ...]:
    """The oracle's turns on the built-in training tasks, recorded until there are ``n``."""
    train = builtin_tasks("train")
    env = env_class(train, viewport=viewport, step_timeout=step_timeout)
    try:
        return tuple(record_until(env, ((task.id, lambda _k: env.reference_action()) for task in train), n))
    finally:
        env.close()
