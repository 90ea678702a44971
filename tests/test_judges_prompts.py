"""Every judge template renders from a next state of its family; missing fields give a clear error."""

from __future__ import annotations

import base64
import json
import struct
import zlib

import gymnasium as gym
import pytest

import claw_envs
from claw_envs import Evaluative, JudgeTemplates, NextState
from judges import prompts
from judges.prompts import PromptError, load, render, template_names, templates_for

# templates written for families that have not landed yet (their specs will name them)
UPCOMING: dict[str, JudgeTemplates] = {}


def tiny_png(width: int = 4, height: int = 3) -> bytes:
    """A real PNG (grey pixels), written with the standard library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# Next states as families that have not landed yet will send them (built by hand; registered envs are run for real).
HAND_BUILT: dict[str, tuple[str, NextState]] = {
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
    specs = [claw_envs.family_spec(i).judge for i in claw_envs.env_ids()] + list(UPCOMING.values())
    used = {name for t in specs for name in (t.prm, t.hint, t.hint_check)}
    assert set(template_names()) == used
    assert {"prm_personal", "hint_personal", "prm_terminal", "prm_gui", "prm_swe", "prm_toolcall"} <= used


REGISTERED_FAMILIES = {claw_envs.family_spec(env_id).name for env_id in claw_envs.env_ids()}


# every hand-built family, registered ones too: the not-yet-registered ones alone are none now (an empty set skips)
@pytest.mark.parametrize("family", sorted(HAND_BUILT))
def test_family_templates_render_from_hand_built_next_state(family):
    action, ns = HAND_BUILT[family]
    templates = templates_for(family) if family in REGISTERED_FAMILIES else UPCOMING[family]
    for template in (templates.prm, templates.hint):
        messages = render(template, ns, action)
        check_messages(messages, template)
        text = user_text(messages)
        for field in ("task", "action"):
            if field in load(template)[1].fields:
                assert str(ns.judge_inputs[field]).splitlines()[0] in text, (template, field)


def real_steps(env_id: str, seed: int = 0):
    """(action, next_state, messages) for a junk action, then reference actions until the episode ends."""
    env = gym.make(env_id).unwrapped
    steps = []
    try:
        env.reset(seed=seed)
        action = "???"
        while action is not None:
            _, _, terminated, truncated, info = env.step(action)
            steps.append((action, info["next_state"], info["messages"]))
            if terminated or truncated:
                break
            action = env.reference_action()
    finally:
        env.close()
    return claw_envs.family_spec(env_id).name, steps


@pytest.mark.parametrize("env_id", claw_envs.env_ids())
def test_family_templates_render_from_the_real_env_with_history(env_id):
    family, steps = real_steps(env_id)
    assert len(steps) >= 2, "a junk step and at least one reference step"
    for action, ns, messages in steps:
        for template in (templates_for(family).prm, templates_for(family).hint):
            rendered = render(template, ns, action, history=messages)
            check_messages(rendered, template)
            text = user_text(rendered)
            assert str(ns.judge_inputs.get("task", "")).splitlines()[0][:60] in text
            assert ns.judge_inputs.get("result", ns.text).strip()[:60] in text


def test_history_is_derived_from_messages_when_the_env_sends_none():
    _, steps = real_steps("claw/Echo-v0")
    action, ns, messages = steps[-1]
    assert "history" not in ns.judge_inputs
    text = user_text(render("prm_generic", ns, action, history=messages))
    assert "[assistant] ???" in text  # the earlier junk step is history
    assert f"[assistant] {action}" not in text  # the judged action is shown on its own


def test_history_as_messages_and_result_as_dict_are_formatted():
    ns = NextState(
        "stop using bold",
        role="user",
        judge_inputs={"history": [{"role": "user", "content": "Tom has 7 apples."}], "result": "stop using bold"},
    )
    assert "[user] Tom has 7 apples." in user_text(render("prm_personal", ns, "**12**"))
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
    assert templates_for("some-plugin-family") == JudgeTemplates("prm_generic", "hint_agent")


def test_huge_and_empty_fields_are_handled():
    _, ns = HAND_BUILT["terminal"]
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
