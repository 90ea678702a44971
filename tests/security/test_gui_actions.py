"""The GUI action parser (claw_envs.gui.actions) is a whitelist over ``ast``: model text is never executed.

Every "bad input" of issue 14 that the parser sees is refused with an ``ActionError`` naming what was wrong:
imports, attribute access off the whitelist, ``eval``/``exec``/``__import__``, comprehensions, names and calls
as arguments, coordinates far off screen, text too long to type (10 MB included, refused before parsing), keys
that do not exist, malformed computer-use calls. Nothing runs while parsing: ``exec``/``eval``/``compile`` are
booby-trapped (``ast.parse`` may only build a tree), and a command that would leave a file behind leaves nothing.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import claw_envs.gui.computer_use  # noqa: F401  parse() imports it lazily: compiling its own source is not model text
from claw_envs.gui.actions import parse
from claw_envs.gui.ops import MAX_ACTION_CHARS, MAX_TEXT_CHARS, ActionError

MARKER = Path("/tmp/claw-gui-parser-was-run")


@pytest.fixture
def nothing_is_executed(monkeypatch):
    """Fail loudly if the parser ever hands text to exec or eval, or compiles it to code (``ast.parse`` compiles
    to a syntax tree only, which is allowed)."""
    real_compile = builtins.compile

    def trap(*args, **kwargs):
        raise AssertionError("the GUI action parser executed model text")

    def tree_only(source, filename, mode, flags=0, *args, **kwargs):
        if not flags & ast.PyCF_ONLY_AST:
            raise AssertionError("the GUI action parser compiled model text to code")
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "exec", trap)
    monkeypatch.setattr(builtins, "eval", trap)
    monkeypatch.setattr(builtins, "compile", tree_only)
    MARKER.unlink(missing_ok=True)
    yield
    monkeypatch.undo()
    assert not MARKER.exists(), "model text ran"


UNSAFE = {
    "import-os": f"import os; os.system('touch {MARKER}')",
    "from-import": "from os import system",
    "import-as": "import pyautogui as os",
    "dunder-import": f"__import__('os').system('touch {MARKER}')",
    "eval": "eval('1+1')",
    "exec": f"exec(\"open('{MARKER}', 'w')\")",
    "open": f"open('{MARKER}', 'w')",
    "attribute-off-whitelist": "pyautogui.os.system('id')",
    "dunder-attribute": "pyautogui.__dict__['click'](1, 2)",
    "globals-of-a-function": "pyautogui.click.__globals__",
    "other-module": "os.system('id')",
    "time-other-than-sleep": "time.time()",
    "subscript-call": "click.__self__('1')",
    "list-comprehension": "[click(str(i)) for i in range(3)]",
    "comprehension-argument": "fill('1', ''.join([c for c in 'abc']))",
    "generator-argument": "pyautogui.hotkey(*(k for k in ['ctrl', 'a']))",
    "lambda": "(lambda: click('1'))()",
    "name-argument": "click(x)",
    "call-argument": "click(str(1))",
    "f-string": "fill('1', f'{secret}')",
    "binop-argument": "pyautogui.click(100 + 5, 20)",
    "starred": "click(*['1'])",
    "double-star": "click(**{'bid': '1'})",
    "assignment": "x = click('1')",
    "walrus": "(x := 1)",
    "if-statement": "if True: click('1')",
    "while-loop": "while True: pass",
    "def": "def f(): pass",
    "dict-argument": "fill('1', {'a': 1})",
    "nested-list-argument": "pyautogui.hotkey([['ctrl']])",
    "bytes-argument": "fill('1', b'abc')",
}


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unsafe_code_is_refused_and_never_runs(name, nothing_is_executed):
    with pytest.raises(ActionError) as err:
        parse(UNSAFE[name])
    assert err.value.tag in ("unsafe_code", "bad_argument"), (name, err.value.tag, str(err.value))
    assert str(err.value)


def test_a_10_mb_string_to_type_is_refused_before_parsing(monkeypatch):
    parsed: list[str] = []
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(source))  # never reached
    with pytest.raises(ActionError, match="characters long") as err:
        parse("pyautogui.typewrite('" + "a" * 10_000_000 + "')")
    assert err.value.tag == "too_long" and not parsed
    monkeypatch.undo()
    with pytest.raises(ActionError, match=f"at most {MAX_TEXT_CHARS:,}"):
        parse("fill('3', '" + "b" * (MAX_TEXT_CHARS + 1) + "')")
    with pytest.raises(ActionError, match="at most"):
        parse('{"name": "computer", "arguments": {"action": "type", "text": "' + "c" * (MAX_TEXT_CHARS + 1) + '"}}')


@pytest.mark.parametrize(
    "action",
    ["pyautogui.click(1e9, 5)", "pyautogui.click(1e400, 5)", "pyautogui.moveTo(-5e7, 0)",
     "pyautogui.click(True, False)", "pyautogui.click(x=10)", "pyautogui.dragTo('a', 'b')"],
)  # fmt: skip
def test_coordinates_far_off_screen_or_not_numbers_are_refused(action):
    with pytest.raises(ActionError) as err:
        parse(action)
    assert err.value.tag in ("off_screen", "bad_argument")


@pytest.mark.parametrize(
    "action",
    ["pyautogui.press('rm -rf /')", "pyautogui.hotkey()", "press('3', 'Ctrl+Nope')", "click('12', button='side')",
     "click('../../etc')", "pyautogui.click(1, 2, clicks=50)", "noop(1, 2, 3)", "fill('1')", "click(bid='1', x=2)",
     "pyautogui.press('a', presses=1000)", "time.sleep(-1)", "fill('1', 'a\\x00b')"],
)  # fmt: skip
def test_bad_arguments_are_refused(action):
    with pytest.raises(ActionError):
        parse(action)


@pytest.mark.parametrize(
    "action",
    ['<tool_call>{"name": "bash", "arguments": {"command": "id"}}</tool_call>',
     '<tool_call>{"name": "computer", "arguments": {"action": "rm"}}</tool_call>',
     '<tool_call>{"name": "computer", "arguments": {"action": "left_click", "coordinate": [1]}}</tool_call>',
     '<tool_call>{"name": "computer", "arguments": {"action": "scroll", "scroll_direction": "sideways"}}</tool_call>',
     '<tool_call>{"name": "computer", "arguments": ' + "[" * 5000 + "]" * 5000 + "}</tool_call>",
     "<tool_call>{not json</tool_call>"],
)  # fmt: skip
def test_malformed_computer_use_calls_are_refused(action):
    with pytest.raises(ActionError) as err:
        parse(action)
    assert err.value.tag in ("bad_tool_call", "bad_argument")


def test_pathological_syntax_is_an_error_not_a_crash():
    for text in ["(" * 5000 + ")" * 5000, "click(" * 3000, "\x00", "'''", "click('1')\n" * 500, "  \n\t "]:
        with pytest.raises(ActionError):
            parse(text)


def test_the_three_forms_are_read(nothing_is_executed):
    element = parse("click('12')")
    assert element.form == "element" and element.ops[0].name == "click" and element.ops[0].args["bid"] == "12"
    ops = parse("fill('3', 'Ann')\nselect_option('4', ['Billing'])\npress('5', 'Control+a')").ops
    assert [o.name for o in ops] == ["fill", "select_option", "press"] and ops[2].args["keys"] == ["Control", "a"]
    code = parse("import pyautogui\npyautogui.click(100, 200)\npyautogui.write('hi')\npyautogui.hotkey('ctrl', 'a')")
    assert code.form == "pyautogui"
    assert [o.name for o in code.ops] == ["mouse_click", "type_text", "hotkey"]
    assert code.ops[0].args == {"x": 100.0, "y": 200.0, "button": "left", "clicks": 1}
    assert code.ops[2].args["keys"] == ["Control", "a"]
    assert [o.name for o in parse("pyautogui.moveTo(5, 6); pyautogui.dragTo(50, 60, duration=0.5)").ops] == [
        "mouse_move",
        "drag_to",
    ]
    fenced = parse("```python\npyautogui.press(['tab', 'enter'])\n```")
    assert [o.args["keys"] for o in fenced.ops] == [["Tab"], ["Enter"]]
    tool = parse('<tool_call>{"name": "computer", "arguments": {"action": "left_click", "coordinate": [10, 20]}}'
                 "</tool_call>")  # fmt: skip
    assert tool.form == "computer_use" and tool.ops[0].args["x"] == 10.0
    openai = parse('{"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "computer", '
                   '"arguments": "{\\"action\\": \\"type\\", \\"text\\": \\"hello\\"}"}}]}')  # fmt: skip
    assert openai.ops[0].name == "type_text" and openai.ops[0].args["text"] == "hello"
    for word, name in (("DONE", "done"), ("FAIL", "fail"), (" wait ", "wait")):
        assert parse(word).ops[0].name == name
    assert parse("DONE").ends_episode and not parse("WAIT").ends_episode


def test_long_actions_are_refused_at_the_documented_limit():
    with pytest.raises(ActionError, match=f"{MAX_ACTION_CHARS:,}"):
        parse("x" * (MAX_ACTION_CHARS + 1))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_with_an_action_error(text):
    try:
        parsed = parse(text)
    except ActionError as err:
        assert str(err)
    else:
        assert parsed.ops
