"""Computer-use tool calls for the GUI env: the ``computer`` tool's schema and its actions mapped onto :class:`Op`.

The actions are those of Anthropic's and Qwen's computer-use tools: ``key``, ``type``, ``mouse_move``,
``left_click``, ``left_click_drag``, ``double_click``, ``triple_click``, ``right_click``, ``middle_click``,
``left_mouse_down``/``left_mouse_up``, ``scroll`` (a direction and amount, or pixels), ``wait``, ``screenshot`` and
``terminate``. The call is read by the shared tool-call parser (:mod:`claw_envs.tool_calls.parse`: bounded JSON),
never executed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claw_envs.gui.ops import (
    MAX_ACTION_CHARS,
    ActionError,
    Op,
    ParsedAction,
    key_names,
    number,
    text_arg,
    wait_seconds,
)
from claw_envs.tool_calls.parse import ParseLimits, parse_action

COMPUTER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "computer",
        "description": "Use the mouse and keyboard on the screen (coordinates in screenshot pixels).",
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string"},
                "coordinate": {"type": "array"},
                "start_coordinate": {"type": "array"},
                "text": {"type": "string"},
                "keys": {"type": "array"},
                "scroll_direction": {"type": "string"},
                "scroll_amount": {"type": "integer"},
                "pixels": {"type": "integer"},
                "duration": {"type": "number"},
                "time": {"type": "number"},
                "status": {"type": "string"},
            },
            "required": ["action"],
        },
    },
}
_TOOL_NAMES = ("computer", "computer_use")
_TOOL_SCHEMAS = {name: COMPUTER_TOOL["function"]["parameters"] for name in _TOOL_NAMES}

_SCROLL_DIRECTIONS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def parse_tool_call(text: str) -> ParsedAction:
    """The ops of a computer-use tool call (Hermes ``<tool_call>`` blocks or an OpenAI message)."""
    turn = parse_action(text, _TOOL_SCHEMAS, limits=ParseLimits(max_chars=MAX_ACTION_CHARS, max_calls=4))
    if turn.errors:
        raise ActionError(f"the computer tool call cannot be read: {turn.errors[0].message}", "bad_tool_call")
    if not turn.calls:
        raise ActionError("no computer tool call found; write <tool_call>{...}</tool_call>", "bad_tool_call")
    ops = [op for call in turn.calls for op in computer_ops(call.arguments)]
    return ParsedAction(tuple(ops), "computer_use")


def computer_ops(args: Mapping[str, Any]) -> list[Op]:
    """The ops of one computer-use call's arguments (``{"action": "left_click", "coordinate": [x, y]}``)."""
    action = args.get("action")

    def point(key: str = "coordinate") -> dict[str, float]:
        value = args.get(key)
        if not isinstance(value, list) or len(value) != 2:
            raise ActionError(f"{action} needs {key}: [x, y]", "bad_argument")
        return {"x": number(value[0], f"{key}[0]"), "y": number(value[1], f"{key}[1]")}

    def maybe_point() -> dict[str, float | None]:
        return point() if "coordinate" in args else {"x": None, "y": None}

    clicks = {"left_click": ("left", 1), "double_click": ("left", 2), "triple_click": ("left", 3),
              "right_click": ("right", 1), "middle_click": ("middle", 1)}  # fmt: skip
    if action in clicks:
        button, count = clicks[action]
        return [Op("mouse_click", {**maybe_point(), "button": button, "clicks": count})]
    if action == "mouse_move":
        return [Op("mouse_move", point())]
    if action == "left_click_drag":
        start = [Op("mouse_move", point("start_coordinate"))] if "start_coordinate" in args else []
        return [*start, Op("drag_to", {**point(), "button": "left"})]
    if action in ("left_mouse_down", "left_mouse_up"):
        return [Op("mouse_down" if action == "left_mouse_down" else "mouse_up", {**maybe_point(), "button": "left"})]
    if action == "type":
        return [Op("type_text", {"text": text_arg(args.get("text"), "text")})]
    if action == "key":
        keys = args.get("keys") or str(args.get("text", "")).split("+")
        return [Op("hotkey", {"keys": key_names(keys)})]
    if action == "scroll":
        if "pixels" in args:
            return [Op("wheel", {**maybe_point(), "clicks": number(args["pixels"], "pixels") / -100})]
        direction = _SCROLL_DIRECTIONS.get(str(args.get("scroll_direction")))
        if direction is None:
            raise ActionError("scroll needs scroll_direction: up, down, left or right", "bad_argument")
        amount = number(args.get("scroll_amount", 3), "scroll_amount")
        return [Op("scroll", {"dx": direction[0] * amount * 100, "dy": direction[1] * amount * 100, **maybe_point()})]
    if action == "wait":
        return [Op("wait", {"seconds": wait_seconds(args.get("duration", args.get("time", 1.0)))})]
    if action == "screenshot":
        return [Op("wait", {"seconds": 0.0})]
    if action == "terminate":
        return [Op("done" if args.get("status", "success") == "success" else "fail")]
    raise ActionError(f"unknown computer action {action!r}", "bad_argument")
