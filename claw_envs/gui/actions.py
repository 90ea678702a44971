"""Read a GUI action out of the model's raw text — parsed, never executed.

Three forms are accepted, each mapped onto the same small set of :class:`Op` values a backend carries out:

* **element actions** in the BrowserGym style, over the ids of the accessibility tree: ``click('12')``,
  ``dblclick``, ``fill('12', 'text')``, ``clear``, ``press('12', 'Enter')``, ``select_option('12', 'France')``,
  ``hover``, ``focus``, ``scroll(0, 300)``, ``goto('/page.html')``, ``send_msg_to_user('text')``, ``noop()``;
* **pyautogui code** in the OSWorld style (``pyautogui.click(300, 200)``, ``typewrite``/``write``, ``press``,
  ``hotkey``, ``keyDown``/``keyUp``, ``moveTo``, ``dragTo``, ``mouseDown``/``mouseUp``, ``scroll``,
  ``doubleClick``, ``rightClick``, ``time.sleep``; several statements, ``import pyautogui`` allowed), or one of
  the words ``WAIT``, ``DONE``, ``FAIL``;
* a **computer-use tool call**: ``<tool_call>{"name": "computer", "arguments": {"action": "left_click",
  "coordinate": [300, 200]}}</tool_call>`` (or the bare JSON object, or the OpenAI ``tool_calls`` form), with
  the actions of Anthropic's and Qwen's computer-use tools (``key``, ``type``, ``mouse_move``, ``left_click``,
  ``left_click_drag``, ``double_click``, ``right_click``, ``scroll``, ``wait``, ``screenshot``, ``terminate``).

Code is read with :func:`ast.parse` and accepted only when every statement is a call of a whitelisted name
whose arguments are literals (numbers, strings, booleans, ``None``, flat lists/tuples of those). Anything else —
``import os``, attribute access off the whitelist, ``eval``, ``__import__``, comprehensions, names, f-strings —
is an :class:`ActionError` with a message for the agent. Nothing the model wrote is ever run as Python.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.gui.computer_use import parse_tool_call
from claw_envs.gui.ops import (
    MAX_ACTION_CHARS,
    ActionError,
    Op,
    ParsedAction,
    key_name,
    key_names,
    number,
    text_arg,
    wait_seconds,
)

MAX_STATEMENTS = 20
"""Most calls in one action."""
CONTROL_WORDS = ("WAIT", "DONE", "FAIL")


# -- the whitelists ---------------------------------------------------------------------------------------------

# name -> (parameter names in order, defaults); a parameter without a default is required
_Signature = tuple[tuple[str, ...], Mapping[str, Any]]
_ELEMENT: dict[str, _Signature] = {
    "click": (("bid", "button"), {"button": "left"}),
    "dblclick": (("bid",), {}),
    "fill": (("bid", "value"), {}),
    "clear": (("bid",), {}),
    "press": (("bid", "key_comb"), {}),
    "select_option": (("bid", "options"), {}),
    "hover": (("bid",), {}),
    "focus": (("bid",), {}),
    "scroll": (("delta_x", "delta_y"), {}),
    "goto": (("url",), {}),
    "send_msg_to_user": (("text",), {}),
    "noop": (("wait_ms",), {"wait_ms": 0}),
}
_XY = {"x": None, "y": None}
_PYAUTOGUI: dict[str, _Signature] = {
    "click": (("x", "y", "clicks", "interval", "button", "duration"), {**_XY, "clicks": 1, "interval": 0.0,
                                                                      "button": "left", "duration": 0.0}),
    "doubleClick": (("x", "y", "interval", "button", "duration"), {**_XY, "interval": 0.0, "button": "left",
                                                                   "duration": 0.0}),
    "tripleClick": (("x", "y", "interval", "button", "duration"), {**_XY, "interval": 0.0, "button": "left",
                                                                   "duration": 0.0}),
    "rightClick": (("x", "y", "duration"), {**_XY, "duration": 0.0}),
    "middleClick": (("x", "y", "duration"), {**_XY, "duration": 0.0}),
    "moveTo": (("x", "y", "duration"), {**_XY, "duration": 0.0}),
    "dragTo": (("x", "y", "duration", "button"), {**_XY, "duration": 0.0, "button": "left"}),
    "mouseDown": (("x", "y", "button"), {**_XY, "button": "left"}),
    "mouseUp": (("x", "y", "button"), {**_XY, "button": "left"}),
    "scroll": (("clicks", "x", "y"), {**_XY}),
    "typewrite": (("message", "interval"), {"interval": 0.0}),
    "write": (("message", "interval"), {"interval": 0.0}),
    "press": (("keys", "presses", "interval"), {"presses": 1, "interval": 0.0}),
    "keyDown": (("key",), {}),
    "keyUp": (("key",), {}),
    "hotkey": ((), {}),  # *keys
}  # fmt: skip
_SLEEP: _Signature = (("seconds",), {})
_ALLOWED_IMPORTS = frozenset({"pyautogui", "time"})
_FENCE = re.compile(r"\A```[a-zA-Z]*\s*\n(?P<body>.*?)\n?```\s*\Z", re.S)


# -- entry point ----------------------------------------------------------------------------------------------


def parse(text: str) -> ParsedAction:
    """The ops of one raw action text; raises :class:`ActionError` with a message for the agent."""
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"the action is {len(text):,} characters long; the limit is {MAX_ACTION_CHARS:,}", "too_long")
    stripped = text.strip()
    if not stripped:
        raise ActionError("the action is empty: write one action, e.g. click('12') or DONE", "empty")
    if stripped.upper() in CONTROL_WORDS:
        return ParsedAction((Op(stripped.lower() if stripped.upper() != "WAIT" else "wait", {"seconds": 1.0}),),
                            "control")  # fmt: skip
    if "<tool_call>" in stripped or stripped.startswith("{"):  # a tool call, an OpenAI message, a bare call object
        return parse_tool_call(stripped if "<tool_call>" in stripped or '"tool_calls"' in stripped
                               else f"<tool_call>{stripped}</tool_call>")  # fmt: skip
    fence = _FENCE.match(stripped)
    if fence:
        stripped = fence.group("body").strip()
        if stripped.upper() in CONTROL_WORDS:
            return parse(stripped)
    return _parse_code(stripped)


# -- code (BrowserGym element actions and pyautogui) ---------------------------------------------------------------


def _parse_code(code: str) -> ParsedAction:
    try:
        tree = ast.parse(code, mode="exec")
    except SyntaxError as err:
        raise ActionError(f"the action is not valid call syntax ({err.msg}, line {err.lineno})", "syntax") from None
    except (ValueError, RecursionError, MemoryError) as err:
        raise ActionError(f"the action cannot be read: {type(err).__name__}", "syntax") from None
    calls = [s for s in tree.body if not _is_allowed_import(s)]
    if not calls:
        raise ActionError("the action holds no call: write one, e.g. click('12') or pyautogui.click(100, 200)")
    if len(calls) > MAX_STATEMENTS:
        raise ActionError(f"the action has {len(calls)} statements; at most {MAX_STATEMENTS}", "too_long")
    ops: list[Op] = []
    forms = set()
    for stmt in calls:
        if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
            raise ActionError(
                f"only calls are allowed, not a {type(stmt).__name__} statement ({_snippet(code, stmt)})", "unsafe_code"
            )
        form, op_list = _read_call(code, stmt.value)
        forms.add(form)
        ops.extend(op_list)
    return ParsedAction(tuple(ops), "pyautogui" if "pyautogui" in forms else "element")


def _is_allowed_import(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import) and all(a.name in _ALLOWED_IMPORTS and a.asname is None for a in stmt.names):
        return True
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        raise ActionError(f"imports are not allowed ({ast.unparse(stmt)[:80]}); only 'import pyautogui'", "unsafe_code")
    return False


def _read_call(code: str, call: ast.Call) -> tuple[str, list[Op]]:
    func = call.func
    if isinstance(func, ast.Name) and func.id in _ELEMENT:
        args = _bind(func.id, _ELEMENT[func.id], call, code)
        return "element", [_element_op(func.id, args)]
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner, name = func.value.id, func.attr
        if owner == "pyautogui" and name in _PYAUTOGUI:
            if name == "hotkey":
                if call.keywords:
                    raise ActionError("pyautogui.hotkey takes key names only, e.g. hotkey('ctrl', 'a')", "bad_argument")
                keys = [_literal(a, code) for a in call.args]
                return "pyautogui", [Op("hotkey", {"keys": key_names(keys)})]
            return "pyautogui", _pyautogui_ops(name, _bind(f"pyautogui.{name}", _PYAUTOGUI[name], call, code))
        if owner == "time" and name == "sleep":
            args = _bind("time.sleep", _SLEEP, call, code)
            return "pyautogui", [Op("wait", {"seconds": wait_seconds(args["seconds"])})]
    shown = ast.unparse(func)[:60]
    raise ActionError(
        f"{shown}(...) is not an allowed action; use element actions (click, fill, press, select_option, hover, "
        "scroll, …), pyautogui.<click|typewrite|press|hotkey|moveTo|dragTo|scroll|…>, WAIT, DONE or FAIL",
        "unsafe_code",
    )


def _bind(name: str, signature: _Signature, call: ast.Call, code: str) -> dict[str, Any]:
    params, defaults = signature
    if len(call.args) > len(params):
        raise ActionError(f"{name} takes at most {len(params)} arguments, got {len(call.args)}", "bad_argument")
    values: dict[str, Any] = {}
    for param, node in zip(params, call.args, strict=False):
        values[param] = _literal(node, code)
    for kw in call.keywords:
        if kw.arg is None:
            raise ActionError(f"{name}: **kwargs are not allowed", "unsafe_code")
        if kw.arg not in params:
            raise ActionError(f"{name} has no argument {kw.arg!r} (it takes {', '.join(params)})", "bad_argument")
        if kw.arg in values:
            raise ActionError(f"{name}: argument {kw.arg!r} given twice", "bad_argument")
        values[kw.arg] = _literal(kw.value, code)
    for param in params:
        if param not in values:
            if param not in defaults:
                raise ActionError(f"{name} needs the argument {param!r}", "bad_argument")
            values[param] = defaults[param]
    return values


def _literal(node: ast.expr, code: str, depth: int = 0) -> Any:
    """A literal argument: a constant, a negative number, or a flat list/tuple of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = node.operand
        if isinstance(inner, ast.Constant) and type(inner.value) in (int, float):
            return -inner.value if isinstance(node.op, ast.USub) else inner.value
    if isinstance(node, ast.List | ast.Tuple) and depth == 0 and len(node.elts) <= 64:
        return [_literal(e, code, depth + 1) for e in node.elts]
    raise ActionError(
        f"arguments must be literal numbers or strings, not {type(node).__name__} ({_snippet(code, node)})",
        "unsafe_code",
    )


def _snippet(code: str, node: ast.AST) -> str:
    text = ast.get_source_segment(code, node) or ast.unparse(node)
    return text if len(text) <= 60 else text[:59] + "…"


# -- checking values ----------------------------------------------------------------------------------------------


def _bid(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,16}", value):
        raise ActionError(f"element ids are the [N] numbers of the accessibility tree, not {value!r}", "bad_argument")
    return value


def _button(value: Any) -> str:
    if value not in ("left", "right", "middle"):
        raise ActionError(f"button must be 'left', 'right' or 'middle', got {value!r}", "bad_argument")
    return str(value)


def _point(args: Mapping[str, Any], name: str, required: bool = False) -> dict[str, float | None]:
    x, y = args.get("x"), args.get("y")
    if isinstance(x, list) and y is None and len(x) == 2:  # pyautogui accepts click((x, y))
        x, y = x
    if x is None and y is None and not required:
        return {"x": None, "y": None}
    if x is None or y is None:
        raise ActionError(f"{name} needs both x and y", "bad_argument")
    return {"x": number(x, f"{name}: x"), "y": number(y, f"{name}: y")}


def _element_op(name: str, args: Mapping[str, Any]) -> Op:
    if name == "scroll":
        return Op("scroll", {"dx": number(args["delta_x"], "delta_x"), "dy": number(args["delta_y"], "delta_y")})
    if name == "goto":
        return Op("goto", {"url": text_arg(args["url"], "the URL")})
    if name == "send_msg_to_user":
        return Op("send_msg_to_user", {"text": text_arg(args["text"], "the message")})
    if name == "noop":
        return Op("wait", {"seconds": wait_seconds(number(args["wait_ms"], "wait_ms") / 1000)})
    out: dict[str, Any] = {"bid": _bid(args["bid"])}
    if name == "click":
        out["button"] = _button(args["button"])
    elif name == "fill":
        out["value"] = text_arg(args["value"], "the text to fill")
    elif name == "press":
        combo = args["key_comb"]
        out["keys"] = key_names(combo.split("+") if isinstance(combo, str) and len(combo) > 1 else [combo])
    elif name == "select_option":
        options = args["options"] if isinstance(args["options"], list) else [args["options"]]
        out["options"] = [text_arg(o, "an option") for o in options]
    return Op(name, out)


def _pyautogui_ops(name: str, args: Mapping[str, Any]) -> list[Op]:
    where = f"pyautogui.{name}"
    if name in ("click", "doubleClick", "tripleClick", "rightClick", "middleClick"):
        clicks = {"doubleClick": 2, "tripleClick": 3}.get(name, args.get("clicks", 1))
        button = {"rightClick": "right", "middleClick": "middle"}.get(name, args.get("button", "left"))
        count = number(clicks, "clicks")
        if count not in (1, 2, 3):
            raise ActionError("clicks must be 1, 2 or 3", "bad_argument")
        return [Op("mouse_click", {**_point(args, where), "button": _button(button), "clicks": int(count)})]
    if name == "moveTo":
        return [Op("mouse_move", _point(args, where, required=True))]
    if name == "dragTo":
        return [Op("drag_to", {**_point(args, where, required=True), "button": _button(args["button"])})]
    if name in ("mouseDown", "mouseUp"):
        return [Op("mouse_down" if name == "mouseDown" else "mouse_up",
                   {**_point(args, where), "button": _button(args["button"])})]  # fmt: skip
    if name == "scroll":
        return [Op("wheel", {**_point(args, where), "clicks": number(args["clicks"], "clicks")})]
    if name in ("typewrite", "write"):
        message = args["message"]
        if isinstance(message, list):  # typewrite(['a', 'enter']) presses keys
            return [Op("key_press", {"keys": [k]}) for k in _keys_list(message)]
        return [Op("type_text", {"text": text_arg(message, "the text to type")})]
    if name == "press":
        keys = args["keys"] if isinstance(args["keys"], list) else [args["keys"]]
        presses = number(args["presses"], "presses")
        if not 1 <= presses <= 20:
            raise ActionError("presses must be between 1 and 20", "bad_argument")
        return [Op("key_press", {"keys": [k]}) for _ in range(int(presses)) for k in _keys_list(keys)]
    return [Op("key_down" if name == "keyDown" else "key_up", {"key": key_name(args["key"])})]


def _keys_list(values: Sequence[Any]) -> list[str]:
    if len(values) > 64:
        raise ActionError("at most 64 keys in one call", "too_long")
    return [key_name(v) for v in values]
