"""What a GUI action comes down to: the :class:`Op` values a backend carries out, the checks every reader of
the model's text applies to their arguments, and the bounds behind those checks.

Both readers of actions build on this: :mod:`.actions` (element actions and pyautogui code) and
:mod:`.computer_use` (computer-use tool calls); the backends (:mod:`.browser`, :mod:`.desktop`) carry the ops out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_ACTION_CHARS = 20_000
"""Longest action text read; a longer one is refused before parsing."""
MAX_TEXT_CHARS = 2_000
"""Longest text typed or filled by one call (a longer one is the agent's error)."""
MAX_WAIT_SECONDS = 3.0
"""Longest ``WAIT``/``time.sleep``/``wait`` honoured; longer waits are cut to this."""

KEY_NAMES: dict[str, str] = {
    **{c: c for c in "abcdefghijklmnopqrstuvwxyz0123456789"},
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
    "enter": "Enter", "return": "Enter", "tab": "Tab", "space": " ", "backspace": "Backspace",
    "delete": "Delete", "del": "Delete", "esc": "Escape", "escape": "Escape", "up": "ArrowUp",
    "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight", "home": "Home", "end": "End",
    "pageup": "PageUp", "pagedown": "PageDown", "shift": "Shift", "ctrl": "Control", "control": "Control",
    "alt": "Alt", "cmd": "Meta", "command": "Meta", "win": "Meta", "super": "Meta", "meta": "Meta",
    "insert": "Insert", "-": "-", "=": "=", ",": ",", ".": ".", "/": "/", ";": ";", "'": "'",
    "[": "[", "]": "]", "\\": "\\", "`": "`",
}  # fmt: skip
"""Key names accepted (pyautogui's, lower case, and Playwright's), mapped to Playwright's names."""


class ActionError(ValueError):
    """The action cannot be carried out as written; ``tag`` names the kind (``unsafe_code``, ``bad_argument`` …)."""

    def __init__(self, message: str, tag: str = "parse_error"):
        super().__init__(message)
        self.tag = tag


@dataclass(frozen=True)
class Op:
    """One thing a backend does. ``name`` is one of :data:`OP_NAMES`; ``args`` are checked values."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


OP_NAMES = frozenset(
    {
        # element ops (``bid``: an id of the accessibility tree)
        "click", "dblclick", "fill", "clear", "press", "select_option", "hover", "focus",
        # page ops
        "scroll", "goto", "send_msg_to_user", "noop",
        # screen ops (pixel coordinates)
        "mouse_click", "mouse_move", "mouse_down", "mouse_up", "drag_to", "type_text", "key_press", "hotkey",
        "key_down", "key_up", "wheel",
        # control
        "wait", "done", "fail",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ParsedAction:
    """The ops of one action, in order, and the form they were written in."""

    ops: tuple[Op, ...]
    form: str  # "element" | "pyautogui" | "computer_use" | "control"

    @property
    def ends_episode(self) -> bool:
        """Whether the action says the agent is finished (``DONE`` / ``FAIL`` / ``terminate``)."""
        return any(op.name in ("done", "fail") for op in self.ops)


# -- checking values ----------------------------------------------------------------------------------------------


def text_arg(value: Any, what: str) -> str:
    """A string argument of at most ``MAX_TEXT_CHARS`` characters with no NUL (``what`` names it in the error)."""
    if not isinstance(value, str):
        raise ActionError(f"{what} must be a string, got {type(value).__name__}", "bad_argument")
    if len(value) > MAX_TEXT_CHARS:
        raise ActionError(f"{what} is {len(value):,} characters; at most {MAX_TEXT_CHARS:,} per action", "too_long")
    if "\0" in value:
        raise ActionError(f"{what} holds a NUL character", "bad_argument")
    return value


def number(value: Any, what: str) -> float:
    """A finite int or float argument (``bool`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ActionError(f"{what} must be a number, got {value!r}", "bad_argument")
    if abs(value) > 1e6:
        raise ActionError(f"{what} = {value!r} is far outside the screen", "off_screen")
    return float(value)


def key_name(value: Any) -> str:
    """One known key name in its canonical spelling (see ``KEY_NAMES``)."""
    if not isinstance(value, str) or (value.lower() not in KEY_NAMES and value not in KEY_NAMES.values()):
        raise ActionError(f"unknown key {value!r}; use names such as 'enter', 'tab', 'ctrl', 'a', 'f5'", "bad_argument")
    return KEY_NAMES.get(value.lower(), value)


def key_names(values: Sequence[Any]) -> list[str]:
    """A key combination: 1 to 6 known key names, each in its canonical spelling (see ``KEY_NAMES``)."""
    if not values or len(values) > 6:
        raise ActionError("a key combination needs 1 to 6 key names", "bad_argument")
    return [key_name(v) for v in values]


def wait_seconds(value: Any) -> float:
    """A wait in seconds: not negative, capped at ``MAX_WAIT_SECONDS``."""
    seconds = number(value, "the wait")
    if seconds < 0:
        raise ActionError("a wait cannot be negative", "bad_argument")
    return min(seconds, MAX_WAIT_SECONDS)
