"""The environment contract every claw family implements.

A family subclasses :class:`ClawEnv` and writes two coroutines, ``_begin(task)`` and
``_act(action)``. The base class does the rest the same way for every family: seeding, task
choice, the chat history in ``info["messages"]``, step indices, truncation, the sync wrappers,
and turning infrastructure failures into a typed ``info["status"]`` instead of an exception.

Bad *agent* output is never an exception: a family answers it with a :class:`NextState` whose
``evaluative`` is -1 and whose ``directive`` says what was wrong.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from claw_envs.tasks import Task, TaskSource, TaskSourceLike, load_source

Role = Literal["user", "tool", "environment"]
Message = dict[str, Any]

MAX_TEXT_LENGTH = 1 << 20


class UnicodeText(spaces.Space[str]):
    """Any Python string up to ``max_length`` characters (Gymnasium's ``Text`` rejects spaces).

    ``sample()`` draws printable text, including spaces, punctuation and non-ASCII letters,
    so that ``check_env`` exercises an env with realistic junk.
    """

    _ALPHABET = tuple(
        "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()[]{}<>#*_-+=/\\\n\té中ü😀"
    )

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, seed: int | np.random.Generator | None = None):
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        picks = self.np_random.integers(0, len(self._ALPHABET), size=length)
        return "".join(self._ALPHABET[i] for i in picks)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


class StepStatus(enum.StrEnum):
    """Whether a step's signal can be learned from. Anything but ``OK`` is masked by trainers."""

    OK = "ok"
    INFRA_FAILURE = "infra_failure"  # generic: the environment, not the agent, failed
    SANDBOX_FAILURE = "sandbox_failure"
    BROWSER_FAILURE = "browser_failure"
    SIMULATOR_FAILURE = "simulator_failure"
    TIMEOUT = "timeout"  # the env step itself overran the pool's per-step timeout


class InfraFailure(Exception):
    """Raised inside a family when its infrastructure (not the agent) failed."""

    def __init__(self, message: str, status: StepStatus = StepStatus.INFRA_FAILURE):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Evaluative:
    """Was the last action good? ``score`` in [-1, 1]; ``tags`` say why (``returncode=1``, ``tests=3/5``)."""

    score: float = 0.0
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not -1.0 <= self.score <= 1.0:
            raise ValueError(f"evaluative score must be in [-1, 1], got {self.score}")
        object.__setattr__(self, "tags", tuple(self.tags))


@dataclass(frozen=True)
class NextState:
    """What the world said after an action — the same type in every family.

    ``judge_inputs`` holds exactly the fields the family's judge prompt needs (task, history
    summary, action, result); ``image`` is PNG bytes for GUI families. ``action_taken`` says whether the
    action was carried out in the world (a command ran, a tool call ran, an answer was graded, a GUI action was
    performed): ``False`` for output that could not be read as an action (:func:`bad_action`), so a run whose
    policy never acts can be told from one that acts badly.
    """

    text: str
    role: Role = "environment"
    step_index: int = 0
    evaluative: Evaluative = field(default_factory=Evaluative)
    directive: str | None = None
    outcome: float | None = None
    image: bytes | None = None
    judge_inputs: Mapping[str, Any] = field(default_factory=dict)
    action_taken: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (the image is reported by size only)."""
        data = dataclasses.asdict(self)
        data["image"] = None if self.image is None else f"<png {len(self.image)} bytes>"
        data["judge_inputs"] = dict(self.judge_inputs)
        return data


@dataclass
class Opening:
    """What a family returns from ``_begin``: the first observation and the starting chat."""

    observation: Any
    messages: list[Message]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Transition:
    """What a family returns from ``_act``.

    ``messages`` are appended to the history after the assistant's action; when ``None`` the base
    class appends one message built from ``next_state`` (``environment`` is sent as ``user``).
    """

    observation: Any
    next_state: NextState
    reward: float = 0.0
    terminated: bool = False
    messages: list[Message] | None = None
    info: dict[str, Any] = field(default_factory=dict)


class ClawEnv(gym.Env[Any, str]):
    """Base class of every claw environment (see the module docstring).

    ``tasks`` is the task source: ``None`` (the family's built-in tasks of ``split``), a :class:`TaskSource`, or a
    path or dataset name read by the family's loader (:meth:`load_tasks`), the value ``--tasks`` passes. A source
    that cannot be read is a :class:`~claw_envs.tasks.TaskSourceError` (a ``ValueError``) here, not at ``reset``.

    Subclasses set ``default_max_turns`` and implement ``default_tasks``, ``_begin``
    and ``_act``; they may override ``_final_outcome`` (outcome when the turn limit truncates an
    episode), ``demonstrations`` (example data for bootstrapping a policy), ``reference_action``
    (a good action for scripted agents), ``null_action`` (giving up, for task checks) and ``aclose``.
    """

    default_max_turns: ClassVar[int] = 8
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    task_loader: ClassVar[Callable[..., TaskSource] | None] = None
    """Reads ``tasks=`` given as text (``loader(source, split=...)``): the family's ``FamilySpec.load_tasks``, handed
    to the class by :func:`claw_envs.register`; subclasses inherit it. ``None``: the family reads no task files."""

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} not in {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.split = split
        self.tasks = self._task_source(tasks, split)
        self.max_turns = max_turns or self.default_max_turns
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self.task: Task | None = None
        self.step_index = 0
        self.messages: list[Message] = []
        self._done = True
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what a family implements ------------------------------------------------------------

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        """The family's built-in tasks for ``split``."""
        raise NotImplementedError

    @classmethod
    def load_tasks(cls, source: str, split: str = "train") -> TaskSource:
        """Read a task source given as text (a file, a folder, a dataset name) with the class's
        :attr:`task_loader`; ``ValueError`` when it has none."""
        if cls.task_loader is None:
            raise ValueError(f"{cls.__name__} reads no task files or datasets (its FamilySpec declares no load_tasks)")
        return cls.task_loader(source, split=split)

    def _task_source(self, tasks: Any, split: str) -> TaskSource:
        if tasks is None:
            return self.default_tasks(split)
        if isinstance(tasks, TaskSource):
            return tasks
        if isinstance(tasks, str | os.PathLike):
            return load_source(self.load_tasks, tasks, split)
        raise TypeError(f"tasks= takes a path, a dataset name or a TaskSource, not {type(tasks).__name__}")

    async def _begin(self, task: Task) -> Opening:
        """Start an episode on ``task``."""
        raise NotImplementedError

    async def _act(self, action: str) -> Transition:
        """Carry out the agent's raw text ``action`` and report the next state."""
        raise NotImplementedError

    def _final_outcome(self) -> float | None:
        """Outcome to record when the turn limit ends an episode (``None``: no outcome)."""
        return None

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """Example ``{"messages": [...], "completion": str}`` pairs for bootstrapping a policy."""
        raise NotImplementedError(f"{type(self).__name__} has no demonstration data")

    def reference_action(self) -> str | None:
        """A good action for the current state when the family can compute one (scripted agents, demos)."""
        return None

    def null_action(self) -> str | None:
        """An action that ends the episode without attempting the task (submit at once, an empty patch,
        ``DONE``); ``claw-envs check`` requires that it does not solve any task. ``None``: the family has none."""
        return None

    async def aclose(self) -> None:
        """Release sandboxes, browsers, servers."""

    # -- the contract ------------------------------------------------------------------------

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode; ``options={"task_id": ...}`` picks a task, else one is drawn with ``np_random``."""
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            self.task = self.tasks.get(str(options["task_id"]))
        else:
            self.task = self.tasks.sample(self.np_random)
        self.step_index = 0
        opening = await self._begin(self.task)
        self.messages = list(opening.messages)
        self._done = False
        info = {**opening.info, "messages": list(self.messages), "task_id": self.task.id, "step_index": 0}
        return opening.observation, info

    async def astep(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Act with the model's raw text; never raises for bad agent output."""
        if self._done:
            raise gym.error.ResetNeeded("call reset() before step(), and again after an episode ends")
        action = coerce_action(action)
        self.step_index += 1
        self.messages.append({"role": "assistant", "content": action})
        status = StepStatus.OK
        try:
            tr = await self._act(action)
        except InfraFailure as err:
            status = err.status
            tr = Transition(
                observation=self._failure_observation(str(err)),
                next_state=NextState(text=f"[{status.value}] {err}", role="environment"),
                terminated=False,
            )
        ns = dataclasses.replace(tr.next_state, step_index=self.step_index)
        truncated = status is not StepStatus.OK or (not tr.terminated and self.step_index >= self.max_turns)
        if truncated and status is StepStatus.OK and ns.outcome is None:
            ns = dataclasses.replace(ns, outcome=self._final_outcome())
        self.messages.extend(tr.messages if tr.messages is not None else [_message_for(ns)])
        self._done = tr.terminated or truncated
        info = {
            **tr.info,
            "next_state": ns,
            "messages": list(self.messages),
            "status": status.value,
            "task_id": self.task.id if self.task else None,
            "step_index": self.step_index,
        }
        return tr.observation, float(tr.reward), bool(tr.terminated), bool(truncated), info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return self._run(self.areset(seed=seed, options=options))

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self._run(self.astep(action))

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m['role']}] {m.get('content', '')}" for m in self.messages)

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
            self._loop.close()
        elif self._loop is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                asyncio.run(self.aclose())
        self._loop = None

    # -- helpers -----------------------------------------------------------------------------

    def _failure_observation(self, message: str) -> Any:
        """Observation returned when infrastructure failed (text families: the message)."""
        return f"[infrastructure failure] {message}"

    def _run(self, coro: Any) -> Any:
        """Drive a coroutine on this env's private event loop (sync API)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError(f"{type(self).__name__}: inside a running event loop use areset()/astep()")
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)


def coerce_action(action: Any) -> str:
    """Turn whatever the agent produced into text (bytes are decoded with replacement)."""
    if isinstance(action, str):
        return action
    if isinstance(action, bytes | bytearray):
        return bytes(action).decode("utf-8", errors="replace")
    if action is None:
        return ""
    return str(action)


def _message_for(ns: NextState) -> Message:
    role = "user" if ns.role == "environment" else ns.role
    return {"role": role, "content": ns.text}


def bad_action(
    text: str, directive: str, *, tags: Sequence[str] = (), role: Role = "environment", **judge_inputs: Any
) -> NextState:
    """The next state for malformed agent output: score -1, a directive that says what was wrong, and
    ``action_taken`` False (nothing was carried out)."""
    return NextState(
        text=text,
        role=role,
        evaluative=Evaluative(-1.0, tuple(tags)),
        directive=directive,
        judge_inputs=judge_inputs,
        action_taken=False,
    )
