"""``claw/GUI-v0``: a real screen — headless Chromium through Playwright, or an Xvfb desktop driven by
pyautogui — with screenshot + accessibility tree observations and actions parsed against a whitelist.

``actions`` reads an action (element actions, pyautogui code; ``computer_use`` a computer-use tool call)
without running it,
``browser`` and ``desktop`` are the backends, ``apps/`` and ``desktop_apps`` the apps the tasks run on,
``server`` serves the web apps on loopback, ``screen`` describes a screen, ``tasks`` holds the built-in tasks
and their checks, ``miniwob`` reads MiniWoB++-style pages, ``signals`` scores a step, and ``env`` is the
environment. Playwright and pyautogui are imported only when a backend starts.
"""

from claw_envs.gui.env import GUIEnv
from claw_envs.spec import FamilySpec, JudgeTemplates, TrainingDefaults

SPEC = FamilySpec(
    name="gui",
    env_id="claw/GUI-v0",
    entry_point="claw_envs.gui.env:GUIEnv",
    judge=JudgeTemplates(prm="prm_gui", hint="hint_agent"),
    training=TrainingDefaults(
        max_new_tokens=48,
        max_turns=6,
        group_size=4,
        rollout_workers=2,
        bootstrap="none",
        warm_start_steps=24,  # SmolLM2-135M writes no action here on its own (README: action formats)
    ),
    load_tasks="claw_envs.gui.tasks:load_tasks",
    env_options=(),
    description="web apps in headless Chromium and Tk apps on an Xvfb desktop, checked by the app's state",
)

__all__ = ["SPEC", "GUIEnv"]
