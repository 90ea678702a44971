"""Every judge template renders from a next state of its family; missing fields give a clear error."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import gymnasium as gym
import pytest

import claw_envs  # noqa: F401  (registers claw/Echo-v0)
from claw_envs import Evaluative, NextState
from judges import prompts
from judges.prompts import FAMILY_TEMPLATES, PromptError, load, render, template_names, templates_for


def tiny_png(width: int = 4, height: int = 3) -> bytes:
    """A real PNG (grey pixels), written with the standard library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# Next states as each family sends them (built by hand until the family lands; then taken from the real env).
HAND_BUILT: dict[str, tuple[str, NextState]] = {
    "conversation": (
        "**Answer:** 12 apples.",
        NextState(
            "please don't use bold, real students don't write like that",
            role="user",
            evaluative=Evaluative(-1.0, ("user_complaint",)),
            directive="Write in plain text without bold.",
            judge_inputs={
                "task": "Tom has 7 apples and buys 5 more. How many now?",
                "history": [{"role": "user", "content": "Tom has 7 apples and buys 5 more. How many now?"}],
                "action": "**Answer:** 12 apples.",
                "result": "please don't use bold, real students don't write like that",
            },
        ),
    ),
    "toolcall": (
        '<tool_call>{"name": "python", "arguments": {"code": "print(7*6)"}}</tool_call>',
        NextState(
            "42",
            role="tool",
            evaluative=Evaluative(0.0, ("tool_ok",)),
            judge_inputs={
                "task": "What is 7 times 6?",
                "history": "[user] What is 7 times 6?",
                "action": '<tool_call>{"name": "python", "arguments": {"code": "print(7*6)"}}</tool_call>',
                "result": "42",
            },
        ),
    ),
    "terminal": (
        "cat /nonexistent",
        NextState(
            "cat: /nonexistent: No such file or directory",
            evaluative=Evaluative(-1.0, ("returncode=1",)),
            directive="The file does not exist; list the directory first.",
            judge_inputs={
                "task": "Print the contents of notes.txt in the home directory.",
                "history": "(first step)",
                "action": "cat /nonexistent",
                "result": {"stdout": "", "stderr": "cat: /nonexistent: No such file or directory", "returncode": 1},
            },
        ),
    ),
    "swe": (
        "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-def add(a, b): return a - b\n+def add(a, b): return a + b\n",
        NextState(
            "tests=5/5 passed",
            evaluative=Evaluative(1.0, ("tests=5/5",)),
            outcome=1.0,
            judge_inputs={
                "task": "add() subtracts instead of adding.",
                "action": "--- a/calc.py\n+++ b/calc.py\n-def add(a, b): return a - b\n+def add(a, b): return a + b",
                "result": "test_add PASSED\ntest_add_negative PASSED\n5 passed in 0.02s",
            },
        ),
    ),
    "gui": (
        "page.click('text=Submit')",
        NextState(
            '- button "Submit" [disabled]\n- text "Thank you, form sent"',
            evaluative=Evaluative(0.0),
            image=tiny_png(),
            judge_inputs={
                "task": "Fill in the form and submit it.",
                "action": "page.click('text=Submit')",
                "result": '- button "Submit" [disabled]\n- text "Thank you, form sent"',
            },
        ),
    ),
}


def user_text(messages: list[dict]) -> str:
    content = messages[1]["content"]
    return content if isinstance(content, str) else content[0]["text"]


def check_messages(messages: list[dict], template: str) -> None:
    assert [m["role"] for m in messages] == ["system", "user"]
    system = messages[0]["content"]
    assert "\\boxed{1}" in system and "\\boxed{-1}" in system
    if template.startswith("hint_"):
        assert "[HINT_START]" in system and "[HINT_END]" in system
    assert "{{" not in system + user_text(messages) and "{%" not in system + user_text(messages)
    json.dumps(messages)  # an OpenAI request body must be JSON


def test_every_template_belongs_to_a_family():
    used = {name for pair in FAMILY_TEMPLATES.values() for name in pair}
    assert set(template_names()) == used
    assert {"prm_personal", "hint_personal", "prm_terminal", "prm_gui", "prm_swe", "prm_toolcall"} <= used


@pytest.mark.parametrize("family", sorted(HAND_BUILT))
def test_family_templates_render_from_hand_built_next_state(family):
    action, ns = HAND_BUILT[family]
    for template in templates_for(family):
        messages = render(template, ns, action)
        check_messages(messages, template)
        text = user_text(messages)
        for field in ("task", "action"):
            if field in load(template)[1].fields:
                assert str(ns.judge_inputs[field]).splitlines()[0] in text, (template, field)
    assert templates_for(family) == FAMILY_TEMPLATES[family]


def test_echo_templates_render_from_the_real_env_with_history():
    env = gym.make("claw/Echo-v0").unwrapped
    try:
        env.reset(seed=1)
        env.step("junk")
        action = env.reference_action()
        _, _, terminated, _, info = env.step(action)
        assert terminated
        ns = info["next_state"]
        for template in templates_for("echo"):
            messages = render(template, ns, action, history=info["messages"])
            check_messages(messages, template)
            text = user_text(messages)
            assert ns.judge_inputs["task"] in text and "Correct." in text
            assert "[assistant] junk" in text  # the earlier step is history
            assert f"[assistant] {action}" not in text  # the judged action is shown apart, not as history
    finally:
        env.close()


def test_conversation_history_list_and_terminal_result_dict_are_formatted():
    action, ns = HAND_BUILT["conversation"]
    assert "[user] Tom has 7 apples" in user_text(render("prm_personal", ns, action))
    action, ns = HAND_BUILT["terminal"]
    text = user_text(render("prm_terminal", ns, action))
    assert "returncode: 1" in text and "stderr: cat: /nonexistent" in text


def test_gui_template_attaches_the_screenshot_as_a_data_url():
    action, ns = HAND_BUILT["gui"]
    messages = render("prm_gui", ns, action)
    text_part, image_part = messages[1]["content"]
    assert text_part["type"] == "text" and "Thank you, form sent" in text_part["text"]
    assert image_part["type"] == "image_url"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == ns.image


def test_missing_fields_are_named():
    bare = NextState("ok", judge_inputs={"result": "ok"})
    with pytest.raises(PromptError, match=r"prm_terminal.*\['task'\]") as err:
        render("prm_terminal", bare, "ls")
    assert err.value.missing == ("task",)
    _, gui = HAND_BUILT["gui"]
    no_image = NextState(gui.text, judge_inputs=gui.judge_inputs)
    with pytest.raises(PromptError, match=r"\['image'\]"):
        render("prm_gui", no_image, "click")
    # personal PRM needs only the reply and the reaction: a live proxy may have nothing else
    messages = render("prm_personal", NextState("thanks!", role="user"), "Here you go.")
    assert "thanks!" in user_text(messages) and "Here you go." in user_text(messages)


def test_unknown_template_and_family():
    with pytest.raises(PromptError, match=r"no judge template 'prm_nope'.*prm_terminal"):
        render("prm_nope", NextState("x"), "y")
    assert templates_for("some-plugin-family") == ("prm_generic", "hint_agent")


def test_huge_and_empty_fields_are_handled():
    _, ns = HAND_BUILT["toolcall"]
    huge = NextState("x", judge_inputs={**ns.judge_inputs, "result": "y" * 100_000})
    text = user_text(render("prm_toolcall", huge, ""))
    assert len(text) < 10_000 and "characters cut" in text
    empty = NextState("", judge_inputs={"task": "t", "action": "", "result": ""})
    text = user_text(render("prm_generic", empty, ""))
    assert "(the agent sent nothing)" in text and "(nothing)" in text


@pytest.fixture
def scratch_prompts(tmp_path, monkeypatch):
    """Point the loader at a scratch directory of templates (caches cleared before and after)."""
    monkeypatch.setattr(prompts, "PROMPTS_DIR", tmp_path)
    prompts.load.cache_clear()
    prompts._environment.cache_clear()
    yield tmp_path
    prompts.load.cache_clear()
    prompts._environment.cache_clear()


def test_malformed_templates_give_clear_errors(scratch_prompts):
    (scratch_prompts / "no_header.jinja").write_text("{% block system %}s{% endblock %}{% block user %}u{% endblock %}")
    (scratch_prompts / "undeclared.jinja").write_text(
        "{# needs: action #}{% block system %}s{% endblock %}{% block user %}{{ secret }}{% endblock %}"
    )
    (scratch_prompts / "no_blocks.jinja").write_text("{# needs: action #}just text")
    (scratch_prompts / "bad_syntax.jinja").write_text("{# needs: action #}{% block system %}{{ oops {% endblock %}")
    ns = NextState("r")
    with pytest.raises(PromptError, match="needs:"):
        render("no_header", ns, "a")
    with pytest.raises(PromptError, match=r"does not declare.*secret"):
        render("undeclared", ns, "a")
    with pytest.raises(PromptError, match="lacks blocks"):
        render("no_blocks", ns, "a")
    with pytest.raises(PromptError, match=r"bad_syntax.*line 1"):
        render("bad_syntax", ns, "a")
