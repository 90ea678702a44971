"""The GUI tasks: our local web apps and Tk desktop apps, each with a check and an oracle script.

A task's data:

* ``backend``: ``browser`` or ``desktop``; ``app``: the page under ``apps/`` (``form.html``) or the desktop app's
  name (``notes``); ``query``: an optional query string for the page;
* ``instruction``: what the agent is asked to do;
* ``expect``: the app's state when the task is done — every key must equal the app's own ``clawState()`` value
  (read from the page, or from the desktop app's state file) when the agent says ``DONE`` or the steps run out;
* ``oracle``: a script of actions that solves it. ``{id:ROLE:NAME}`` in a step stands for the quoted id of the
  element with that role and name on the screen at that step, ``{xy:ROLE:NAME}`` for its centre ``x, y``;
* ``max_steps``: the step limit (15 unless set).

MiniWoB++ pages are a task source too: :func:`load_tasks` reads a folder of them (:func:`miniwob_tasks`), and
:mod:`.miniwob` runs their episodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from claw_envs.gui.screen import Screen
from claw_envs.tasks import Task, TaskList

DEFAULT_MAX_STEPS = 15
APPS = resources.files("claw_envs.gui").joinpath("apps")
_SLOT = re.compile(r"\{(id|xy):([^:{}]+):([^{}]+)\}")


def _task(task_id: str, split: str, app: str, instruction: str, expect: Mapping[str, Any], oracle: list[str],
          *, backend: str = "browser", query: str = "") -> Task:  # fmt: skip
    data = {"backend": backend, "app": app, "query": query, "instruction": instruction, "expect": dict(expect),
            "oracle": oracle, "max_steps": DEFAULT_MAX_STEPS}  # fmt: skip
    return Task(task_id, split, data)


def _form(name: str, email: str, topic: str, message: str) -> tuple[str, dict[str, Any], list[str]]:
    instruction = f"Send the contact form as {name} ({email}) about {topic} with the message '{message}'."
    expect = {"submitted": {"name": name, "email": email, "topic": topic, "message": message}}
    oracle = [
        f"fill({{id:textbox:Name}}, '{name}')",
        f"fill({{id:textbox:Email}}, '{email}')",
        f"select_option({{id:combobox:Topic}}, '{topic}')",
        f"fill({{id:textbox:Message}}, '{message}')",
        "click({id:button:Send})",
    ]
    return instruction, expect, oracle


def _login(user: str, password: str) -> tuple[str, dict[str, Any], list[str]]:
    oracle = [
        f"fill({{id:textbox:Username}}, '{user}')",
        f"fill({{id:textbox:Password}}, '{password}')",
        "click({id:button:Sign in})",
    ]
    return f"Sign in as {user} with the password {password}.", {"loggedIn": user}, oracle


def _computer_click(role: str, name: str) -> str:
    args = f'{{"action": "left_click", "coordinate": [{{xy:{role}:{name}}}]}}'
    return f'<tool_call>{{"name": "computer", "arguments": {args}}}</tool_call>'


def _builtin() -> list[Task]:
    todo_done = [{"text": "Buy milk", "done": True}, {"text": "Call Bob", "done": False},
                 {"text": "Water plants", "done": False}]  # fmt: skip
    return [
        _task("form-ann", "train", "form.html", *_form("Ann Lee", "ann@example.com", "Billing", "Invoice 42 missing")),
        _task("form-raj", "test", "form.html", *_form("Raj Patel", "raj@example.org", "Support", "The app crashes")),
        _task("todo-water", "train", "todo.html", "Add the task 'Water plants' and mark 'Buy milk' as done.",
              {"items": todo_done},
              ["fill({id:textbox:New task}, 'Water plants')", "click({id:button:Add})",
               "click({id:checkbox:Buy milk})"]),
        _task("todo-rent", "test", "todo.html", "Delete the task 'Call Bob' and add the task 'Pay rent'.",
              {"items": [{"text": "Buy milk", "done": False}, {"text": "Pay rent", "done": False}]},
              ["click({id:button:Delete Call Bob})", "fill({id:textbox:New task}, 'Pay rent')",
               "click({id:button:Add})"]),
        _task("settings-dark", "train", "settings.html",
              "Turn dark mode on and email notifications off, keep auto-save on, and save the settings.",
              {"saved": {"dark": True, "notifications": False, "autosave": True}},
              [_computer_click("switch", "Dark mode"), _computer_click("switch", "Email notifications"),
               _computer_click("button", "Save settings")]),
        _task("table-price", "train", "table.html", "Sort the products by price, from the highest to the lowest.",
              {"sortKey": "price", "sortDir": "desc"},
              ["click({id:button:Sort by price})", "click({id:button:Sort by price})"]),
        _task("date-april", "train", "datepicker.html", "Set the travel date to April 9, 2024.",
              {"date": "2024-04-09"},
              ["click({id:button:Open calendar})", "click({id:button:Next month})",
               "click({id:button:April 9, 2024})"]),
        _task("date-leap", "test", "datepicker.html", "Set the travel date to February 29, 2024.",
              {"date": "2024-02-29"},
              ["click({id:button:Open calendar})", "click({id:button:Previous month})",
               "click({id:button:February 29, 2024})"]),
        _task("checkout-express", "train", "checkout/cart.html",
              "Order 2 notebooks and no pens, delivered by Express to Jo Park, 1 Main St.",
              {"order": {"notebooks": 2, "pens": 0, "name": "Jo Park", "address": "1 Main St", "speed": "Express"}},
              ["fill({id:spinbutton:Notebooks (4 EUR each)}, '2')", "click({id:button:Continue to shipping})",
               "fill({id:textbox:Full name}, 'Jo Park')", "fill({id:textbox:Street address}, '1 Main St')",
               "select_option({id:combobox:Delivery}, 'Express')", "click({id:button:Continue to review})",
               "click({id:button:Place order})"]),
        _task("modal-delete", "train", "modal.html", "Delete the file report.pdf, and no other file.",
              {"files": ["notes.txt", "photo.png", "budget.xlsx"], "dialogOpen": False},
              ["click({id:button:Delete report.pdf})", "click({id:button:Yes, delete})"]),
        _task("drag-card", "train", "dragdrop.html", "Drag the card 'Write report' to the Done column.",
              {"columns": {"Write report": "Done", "Fix printer": "To do", "Plan party": "Doing"}},
              ["pyautogui.moveTo({xy:listitem:Write report})", "pyautogui.dragTo({xy:region:Done}, duration=0.3)"]),
        _task("search-umbrella", "train", "search.html",
              "Find the red umbrella in the Accessories category and open it.",
              {"opened": "Red umbrella"},
              ["fill({id:searchbox:Search}, 'red')", "select_option({id:combobox:Category}, 'Accessories')",
               "click({id:link:Red umbrella (Accessories)})"]),
        _task("login-mia", "train", "login.html", *_login("mia", "tulip-42")),
        _task("login-omar", "test", "login.html", *_login("omar", "cedar-7")),
        _task("menu-select-all", "train", "menu.html", "Choose 'Select all' from the Edit menu.",
              {"chosen": "Edit > Select all"},
              ["hover({id:button:Edit})", "click({id:menuitem:Select all})"]),
        _task("chat-reply", "train", "chat.html", "Reply 'See you at 5' to Sam and send it with the Enter key.",
              {"sent": ["See you at 5"]},
              ["click({id:textbox:Message})", "pyautogui.typewrite('See you at 5')", "pyautogui.press('enter')"]),
        _task("desktop-notes", "train", "notes", "In the Notes window, set the title to 'Groceries' and save it.",
              {"saved_title": "Groceries"},
              ["pyautogui.click({xy:textbox:Title})", "pyautogui.typewrite('Groceries')",
               "pyautogui.click({xy:button:Save})"], backend="desktop"),
        _task("desktop-prefs", "test", "prefs",
              "In the Preferences window, turn Wi-Fi off and Bluetooth on, then apply.",
              {"applied": {"wifi": False, "bluetooth": True}},
              ["pyautogui.click({xy:checkbox:Wi-Fi})", "pyautogui.click({xy:checkbox:Bluetooth})",
               "pyautogui.click({xy:button:Apply})"], backend="desktop"),
    ]  # fmt: skip


def builtin_tasks(split: str = "train") -> TaskList:
    """The built-in tasks of ``split`` (``train``, ``test`` or ``all``)."""
    tasks = [t for t in _builtin() if split == "all" or t.split == split]
    return TaskList(tasks, split=split)


def load_tasks(source: str, split: str = "train") -> TaskList:
    """Tasks from ``source``: a folder of MiniWoB++-style pages (every ``*.html`` in it is one task)."""
    path = Path(source).expanduser()
    if not path.is_dir():
        raise ValueError(f"{source!r} is not a folder of MiniWoB++-style pages (*.html)")
    return miniwob_tasks(path, split)


def task_root(folder: Path) -> Path:
    """The folder a page may read files from: MiniWoB's ``html/`` when ``folder`` is its ``html/miniwob``."""
    folder = folder.resolve()
    return folder.parent if (folder.parent / "core").is_dir() and not (folder / "core").is_dir() else folder


def miniwob_tasks(folder: Path, split: str = "train") -> TaskList:
    """One task per ``*.html`` page in ``folder`` (id ``miniwob.<name>``); the same pages serve every split."""
    pages = sorted(p for p in folder.resolve().glob("*.html") if p.is_file())
    if not pages:
        raise ValueError(f"no *.html pages in {folder}")
    root = task_root(folder)
    tasks = [
        Task(f"miniwob.{page.stem}", split, {"backend": "browser", "miniwob": str(page), "folder": str(root),
                                             "max_steps": DEFAULT_MAX_STEPS})
        for page in pages
    ]  # fmt: skip
    return TaskList(tasks, split)


def resolve_step(step: str, screen: Screen) -> str | None:
    """An oracle step with its ``{id:…}``/``{xy:…}`` slots filled from ``screen``; ``None`` if one is missing."""
    missing = False

    def fill(match: re.Match[str]) -> str:
        nonlocal missing
        element = screen.find(match.group(2), match.group(3))
        if element is None:
            missing = True
            return ""
        if match.group(1) == "id":
            return repr(element.id)
        x, y = element.center
        return f"{x}, {y}"

    out = _SLOT.sub(fill, step)
    return None if missing else out


def check(expect: Mapping[str, Any], state: Any) -> list[str]:
    """The keys of ``expect`` whose value the app's ``state`` does not have (empty: the task is done)."""
    if not isinstance(state, Mapping):
        return sorted(expect)
    return [key for key, value in expect.items() if state.get(key) != value]
