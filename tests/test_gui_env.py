"""claw/GUI-v0 on the real headless Chromium and a real Xvfb desktop: observations, step signals, every bad input
of issue 14 at the env level (unsafe code, off-screen points, a 10 MB string, external and file:// navigation, a
page that hangs, a renderer that crashes), clean next episodes, MiniWoB++-convention pages, and the desktop
backend's X server lifecycle. One browser env is shared by the module (chromium on 2 cores is slow to start)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from claw_envs.gui.actions import parse
from claw_envs.gui.env import GUIEnv
from claw_envs.gui.ops import ActionError
from claw_envs.gui.tasks import builtin_tasks

FIXTURES = Path(__file__).parent / "fixtures" / "gui" / "miniwob" / "html" / "miniwob"
MARKER = Path("/tmp/claw-gui-env-was-run")
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def env():
    e = GUIEnv(split="all", step_timeout=5.0)
    yield e
    e.close()


@pytest.fixture(scope="module")
def miniwob():
    e = GUIEnv(tasks=str(FIXTURES), step_timeout=4.0)
    yield e
    e.close()


def step(env: GUIEnv, action: str):
    obs, _, terminated, truncated, info = env.step(action)
    return obs, info["next_state"], info, terminated or truncated


def ids(env: GUIEnv) -> dict[str, str]:
    """``role name -> id`` of the current screen."""
    return {f"{e.role} {e.name}": e.id for e in env._screen.elements.values()}


def test_tasks_cover_twelve_apps_and_two_desktop_tasks():
    tasks = list(builtin_tasks("all"))
    apps = {t.data["app"].split("/")[0] for t in tasks if t.data["backend"] == "browser"}
    assert len(apps) >= 12, apps
    assert sum(t.data["backend"] == "desktop" for t in tasks) >= 2
    assert all(t.data["max_steps"] == 15 and t.data["oracle"] and t.data["expect"] for t in tasks)


def test_observation_next_state_and_judge_inputs(env):
    obs, info = env.reset(options={"task_id": "form-ann"})
    assert obs["screenshot"].shape == (600, 800, 3) and obs["screenshot"].dtype == np.uint8
    assert obs["screenshot"].std() > 0  # a real rendering, not a blank
    assert '[2] textbox "Name"' in obs["a11y"] and obs["url"].endswith("/form.html") and obs["title"] == "Contact us"
    assert info["messages"][0]["role"] == "system" and "Ann Lee" in info["messages"][1]["content"]
    _, ns, info, done = step(env, "fill('2', 'Ann Lee')")
    assert not done and info["status"] == "ok" and ns.role == "environment"
    assert ns.evaluative.score == 0.5 and ns.evaluative.tags == ("changed",)
    assert ns.image[:8] == b"\x89PNG\r\n\x1a\n" and 'value="Ann Lee"' in ns.text
    ji = ns.judge_inputs
    assert ji["task"].startswith("Send the contact form") and ji["action"] == "fill('2', 'Ann Lee')"
    assert ji["image_after"] == ns.image and ji["image_before"] != ji["image_after"]
    assert ji["image_before"][:4] == b"\x89PNG" and 'value="Ann Lee"' in ji["result"]
    # ids are stable: the same element keeps its id after the page changed
    assert ids(env)["textbox Name"] == "2"


def test_page_messages_become_the_directive_and_done_is_checked(env):
    env.reset(options={"task_id": "login-mia"})
    el = ids(env)
    step(env, f"fill('{el['textbox Username']}', 'mia')")
    step(env, f"fill('{el['textbox Password']}', 'wrong')")
    _, ns, _, _ = step(env, f"click('{el['button Sign in']}')")
    assert ns.directive == "Wrong password." and ns.evaluative.tags == ("app_message",)
    assert "Message from the app: Wrong password." in ns.text
    _, ns, _, done = step(env, "DONE")
    assert done and ns.outcome == 0.0 and ns.evaluative.score == -1.0 and "loggedIn" in ns.directive


def test_actions_that_target_nothing_or_change_nothing_are_minus_one(env):
    env.reset(options={"task_id": "table-price"})
    for action, tag in [
        ("click('999')", "no_target"),
        ("pyautogui.click(5000, 10)", "off_screen"),
        ('<tool_call>{"name": "computer", "arguments": {"action": "left_click", "coordinate": [-3, 4]}}</tool_call>',
         "off_screen"),
        ("click('1')", "no_change"),  # the heading does nothing
        ("hmm, let me think", "syntax"),
    ]:  # fmt: skip
        _, ns, info, _ = step(env, action)
        assert info["status"] == "ok" and ns.evaluative.score == -1.0 and ns.directive, (action, ns)
        assert ns.evaluative.tags == (tag,), (action, ns.evaluative)
    _, ns, _, _ = step(env, "WAIT")
    assert ns.evaluative.score == 0.0  # waiting is never "changed nothing"
    _, ns, info, _ = step(env, "send_msg_to_user('The table is sorted.')")
    assert ns.evaluative.score == 0.0 and info["messages_to_user"] == ["The table is sorted."]


def test_unsafe_code_and_a_10_mb_string_are_refused_in_the_env(env):
    env.reset(options={"task_id": "chat-reply"})
    MARKER.unlink(missing_ok=True)
    for action in (f"import os; os.system('touch {MARKER}')", f"__import__('os').system('touch {MARKER}')",
                   "pyautogui.typewrite('" + "x" * 10_000_000 + "')"):  # fmt: skip
        _, ns, info, _ = step(env, action)
        assert info["status"] == "ok" and ns.evaluative.score == -1.0 and ns.directive
    assert not MARKER.exists()
    assert 'value=""' in env._screen.tree  # nothing was typed


def test_navigation_off_the_task_is_blocked(env):
    env.reset(options={"task_id": "search-umbrella"})
    url = env._screen.url
    for target in (
        "https://example.com/",
        "file:///etc/passwd",
        "http://10.0.0.1:8080/x",
        "javascript:alert(1)",
        "data:text/html,<script>window.clawState = () => ({opened: 'Red umbrella'})</script>",
    ):
        _, ns, info, _ = step(env, f"goto({target!r})")
        assert info["status"] == "ok" and ns.evaluative.tags == ("blocked",), (target, ns)
        assert env._screen.url == url
    _, ns, _, _ = step(env, "goto('todo.html')")  # the task's own server is fine
    assert ns.evaluative.score == 0.5 and env._screen.title == "Todo list"


def test_the_oracle_script_does_not_skip_a_step_after_a_junk_action(env):
    env.reset(options={"task_id": "chat-reply"})
    step(env, "let me look first")
    actions = []
    while True:
        actions.append(env.reference_action())
        _, ns, _, done = step(env, actions[-1])
        if done:
            break
    assert actions[0].startswith("click(") and actions[-1] == "DONE" and ns.outcome == 1.0


def test_the_oracle_moves_on_after_a_click_that_landed_but_overran_its_deadline(env, monkeypatch):
    """CI, on a loaded machine: Playwright's click on 'Delete Call Bob' landed, then timed out; the oracle retried a
    button that was gone ("no oracle action at step 2"). A changed screen is the step taking effect."""
    env.reset(options={"task_id": "todo-rent"})
    backend, perform = env._backend, env._backend.perform
    late = []

    async def lands_then_times_out(op, screen):
        await perform(op, screen)
        if not late:
            late.append(op)
            raise ActionError("click on [x] failed: it did not become visible, enabled and uncovered in time", "x")

    monkeypatch.setattr(backend, "perform", lands_then_times_out)
    actions = []
    while True:
        actions.append(env.reference_action())
        assert actions[-1] is not None, actions
        _, ns, _, done = step(env, actions[-1])
        if done:
            break
    assert late and len(actions) == 4 and actions[-1] == "DONE" and ns.outcome == 1.0, (actions, ns)


def test_demonstrations_are_the_oracle_on_the_training_tasks_recorded_for_real(env):
    first, second = list(builtin_tasks("train"))[:2]
    assert len(first.data["oracle"]) + 1 < 10 <= len(first.data["oracle"]) + len(second.data["oracle"]) + 2
    rows = env.demonstrations(10, seed=0)  # the first two training tasks are played: recording stops there
    distinct = {json.dumps(r, sort_keys=True): r for r in rows}
    assert len(distinct) == 10  # every step and DONE once (a click that missed on a busy machine: again)
    tasks = {r["messages"][1]["content"].split("\n")[0] for r in rows}
    assert tasks == {f"Task: {t.data['instruction']}" for t in (first, second)}
    assert any(r["completion"] == "DONE" for r in rows)
    for row in distinct.values():
        assert parse(row["completion"]).ops  # an action the env reads, slots filled from the screen it was taken on
        assert "{id:" not in row["completion"] and "{xy:" not in row["completion"]
        assert row["messages"][1]["content"].startswith("Task: ")


def test_the_next_episode_is_clean(env):
    env.reset(options={"task_id": "checkout-express"})
    while True:  # place the order (sessionStorage, three pages)
        _, ns, _, done = step(env, env.reference_action())
        if done:
            break
    assert ns.outcome == 1.0
    env.reset(options={"task_id": "checkout-express"})
    assert env._run(env._backend.app_state())["order"] is None
    _, ns, _, _ = step(env, "DONE")
    assert ns.outcome == 0.0


def test_a_page_that_hangs_or_crashes_is_a_browser_failure_and_the_next_episode_is_clean(miniwob):
    miniwob.reset(options={"task_id": "miniwob.hang-and-leak"})
    el = ids(miniwob)
    _, ns, info, _ = step(miniwob, f"click('{el['button Leak']}')")
    assert info["status"] == "ok" and ns.evaluative.tags == ("blocked",) and "10.9.8.7" in ns.directive
    _, ns, info, _ = step(miniwob, f"click('{el['link Host file']}')")  # file:// outside the task's folder
    assert info["status"] == "ok" and ns.evaluative.tags == ("blocked",), ns
    assert miniwob._screen.url.endswith("hang-and-leak.html")
    _, ns, info, done = step(miniwob, f"click('{ids(miniwob)['button Freeze']}')")  # the page was loaded again
    assert info["status"] == "browser_failure" and done and "[browser_failure]" in ns.text
    obs, info = miniwob.reset(options={"task_id": "miniwob.click-button"})
    assert f"[{button_to_click(miniwob)}] button" in obs["a11y"]

    async def crash() -> None:
        session = await miniwob._backend._page.context.new_cdp_session(miniwob._backend._page)
        with contextlib.suppress(Exception):  # the renderer died under the call
            await asyncio.wait_for(session.send("Page.crash"), 2.0)

    miniwob._run(crash())
    _, ns, info, _ = step(miniwob, "click('1')")
    assert info["status"] == "browser_failure", ns.text
    obs, _ = miniwob.reset(options={"task_id": "miniwob.click-button"})
    assert f"[{button_to_click(miniwob)}] button" in obs["a11y"]


def button_to_click(env: GUIEnv) -> str:
    """The id of the button a click-button page asks for (``Click on the "X" button.``)."""
    label = re.fullmatch(r'Click on the "(.+)" button\.', env._instruction)
    assert label, env._instruction
    return ids(env)[f"button {label.group(1)}"]


def test_miniwob_pages_report_reward_and_done_through_their_globals(miniwob):
    assert {t.id for t in miniwob.tasks} == {f"miniwob.{p.stem}" for p in FIXTURES.glob("*.html")}
    for right in (True, False):
        miniwob.reset(seed=11, options={"task_id": "miniwob.unicode-test"})
        target = button_to_click(miniwob)
        if not right:
            target = next(i for name, i in ids(miniwob).items() if name.startswith("button ") and i != target)
        _, ns, info, done = step(miniwob, f"click('{target}')")
        assert done and ns.outcome == float(right) and info["status"] == "ok", ns
        assert info["miniwob"]["raw_reward"] == (1.0 if right else -1.0)
        assert (ns.directive is None) == right
        if not right:
            assert "You clicked on" in ns.directive and "when you should have clicked on" in ns.directive
    assert miniwob.reference_action() is None  # MiniWoB pages carry no oracle


def test_a_miniwob_reset_with_one_seed_gives_the_same_problem(miniwob):
    """MiniWoB's own env seeds ``Math.seedrandom`` before each episode: the same seed, the same instruction and
    page; another seed, another problem."""
    seen = {}
    for seed in (5, 5, 6):
        obs, info = miniwob.reset(seed=seed, options={"task_id": "miniwob.enter-text"})
        seen.setdefault(seed, []).append((info["instruction"], obs["a11y"]))
    assert seen[5][0] == seen[5][1] and seen[5][0][0] != seen[6][0][0], seen
    assert re.fullmatch(r'Enter "\w+" into the text field and press Submit\.', seen[5][0][0])
    name = re.search(r'"(\w+)"', seen[5][0][0]).group(1)
    el = ids(miniwob)
    box = next(i for key, i in el.items() if key.startswith("textbox"))
    step(miniwob, f"fill('{box}', '{seen[6][0][0].split(chr(34))[1]}')")
    _, ns, info, done = step(miniwob, f"click('{el['button Submit']}')")
    assert done and ns.outcome == 1.0 and name != seen[6][0][0].split(chr(34))[1]


def test_the_pages_own_clock_does_not_end_an_episode(tmp_path):
    """A page whose limit is 1.5 s (set the way MiniWoB pages set theirs), an agent that waits 2.5 s before it
    clicks: still solved on its raw reward; MiniWoB's time-scaled reward, reported beside it, has run out."""
    shutil.copytree(FIXTURES.parent, tmp_path / "html")
    page = tmp_path / "html" / "miniwob" / "click-button.html"
    text = page.read_text()
    page.write_text(text.replace("var buttons = [", "core.EPISODE_MAX_TIME = 1500; // 1.5 seconds\nvar buttons = [", 1))
    env = GUIEnv(tasks=str(page.parent), step_timeout=4.0)
    try:
        env.reset(seed=0, options={"task_id": "miniwob.click-button"})
        time.sleep(2.5)
        _, ns, info, done = step(env, f"click('{button_to_click(env)}')")
        assert done and ns.outcome == 1.0 and info["status"] == "ok", (ns, info.get("miniwob"))
        result = info["miniwob"]
        assert result["page_limit_s"] == 1.5 and result["seconds"] > 2.4 and result["reason"] == ""
        assert result["raw_reward"] == 1.0 and result["time_scaled_reward"] == 0.0
    finally:
        env.close()


def test_desktop_backend_acts_on_a_real_x_server_and_stops_it():
    env = GUIEnv(split="all", step_timeout=8.0)
    try:
        obs, _ = env.reset(options={"task_id": "desktop-notes"})
        assert obs["title"] == "Notes" and obs["screenshot"].shape == (600, 800, 3)
        xvfb = env._backends["desktop"]._xvfb
        assert xvfb is not None and xvfb.poll() is None
        el = ids(env)
        _, ns, info, _ = step(env, f"click('{el['button Save']}')")  # an element action, carried out by pyautogui
        assert ns.directive == "The title is empty." and info["status"] == "ok"
        for action, tag in (("pyautogui.click(900, 10)", "off_screen"), ("goto('https://example.com')", "bad_argument"),
                            ("click('77')", "no_target")):  # fmt: skip
            _, ns, _, _ = step(env, action)
            assert ns.evaluative.tags == (tag,), (action, ns)
        x, y = env._screen.find("textbox", "Title").center
        step(env, f"pyautogui.click({x}, {y})")
        _, ns, _, _ = step(env, "pyautogui.typewrite('Milk')")
        assert 'value="Milk"' in ns.text
        _, ns, _, done = step(env, "DONE")
        assert done and ns.outcome == 0.0  # typed but never saved
        env.reset(options={"task_id": "desktop-notes"})
        assert 'value=""' in env._screen.tree  # a new app process: nothing carried over
    finally:
        env.close()
    assert xvfb.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(xvfb.pid, 0)
