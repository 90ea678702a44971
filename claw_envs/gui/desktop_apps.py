"""The Tk apps of the desktop tasks, run as ``python -m claw_envs.gui.desktop_apps STATE_DIR WxH`` (the app's
name arrives later in ``STATE_DIR/app``).

Each app fills the X screen and reports itself through ``STATE_DIR/state.json``: its window title, every mapped
widget as a tree line with a stable id and its box in screen pixels, its real state (what the task's check reads)
and the messages it posted to the user. The env asks for a fresh report by writing a number to
``STATE_DIR/request``; the app handles every pending X event first, then writes the report with that number as
``ack`` (so the report reflects all input sent before the request).
"""

from __future__ import annotations

import json
import os
import sys
import time
import tkinter as tk
from pathlib import Path
from typing import Any

POLL_MS = 20


class DesktopApp:
    """Base of the Tk apps: the report and the request loop; subclasses build widgets and define ``state``."""

    title = "App"

    def __init__(self, root: tk.Tk, state_dir: Path):
        self.root = root
        self.state_dir = state_dir
        self.messages: list[str] = []
        self.names: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self.last_request = ""
        root.title(self.title)
        self.build()

    def build(self) -> None:
        """Create the widgets."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """The app's real state, read by the task's check."""
        raise NotImplementedError

    def say(self, text: str) -> None:
        """Post a message to the user (it becomes the step's directive)."""
        self.messages.append(text)

    def named(self, widget: tk.Widget, name: str) -> tk.Widget:
        """Give ``widget`` an accessible name (for an entry: the label next to it)."""
        self.names[str(widget)] = name
        return widget

    # -- the report ------------------------------------------------------------------------------------

    def poll(self) -> None:
        """Answer a new request from the env with a fresh report, then look again in ``POLL_MS``."""
        try:
            request = (self.state_dir / "request").read_text()
        except FileNotFoundError:
            request = ""
        if request and request != self.last_request:
            self.root.update()
            self.last_request = request
            self.write(request)
        self.root.after(POLL_MS, self.poll)

    def write(self, ack: str) -> None:
        """Write the report (tree, boxes, state, messages) atomically, tagged with the request ``ack``."""
        lines: list[str] = []
        elements: dict[str, list[Any]] = {}
        for widget, depth in self._widgets(self.root, 0):
            line = self._describe(widget)
            if line is None:
                continue
            key = str(widget)
            if key not in self.ids:
                self.ids[key] = str(len(self.ids) + 1)
            wid, (role, name, extra) = self.ids[key], line
            lines.append(f"{'  ' * depth}[{wid}] {role} {json.dumps(name)}{extra}")
            box = [widget.winfo_rootx(), widget.winfo_rooty(), widget.winfo_width(), widget.winfo_height()]
            elements[wid] = [role, name, *box]
        report = {"ack": ack, "title": self.root.title(), "lines": lines, "elements": elements,
                  "state": self.state(), "messages": self.messages}  # fmt: skip
        tmp = self.state_dir / "state.json.tmp"
        tmp.write_text(json.dumps(report))
        os.replace(tmp, self.state_dir / "state.json")

    def _widgets(self, widget: tk.Misc, depth: int) -> list[tuple[tk.Widget, int]]:
        out = []
        for child in widget.winfo_children():
            if child.winfo_ismapped():
                out.append((child, depth))
                out.extend(self._widgets(child, depth + 1))
        return out

    def _describe(self, widget: tk.Widget) -> tuple[str, str, str] | None:
        name = self.names.get(str(widget))
        if isinstance(widget, tk.Checkbutton):
            variable = widget.cget("variable")
            checked = bool(int(self.root.getvar(str(variable)))) if str(variable) else False
            return "checkbox", name or widget.cget("text"), " checked" if checked else " unchecked"
        if isinstance(widget, tk.Button):
            return "button", name or widget.cget("text"), ""
        if isinstance(widget, tk.Entry):
            return "textbox", name or "", f" value={json.dumps(widget.get())}"
        if isinstance(widget, tk.Label) and widget.cget("text"):
            return "text", widget.cget("text"), ""
        return None


class NotesApp(DesktopApp):
    """A note's title and a Save button."""

    title = "Notes"

    def build(self) -> None:
        self.saved_title: str | None = None
        tk.Label(self.root, text="Note title").pack(pady=(20, 4))
        self.entry = self.named(tk.Entry(self.root, width=30), "Title")
        self.entry.pack()
        tk.Button(self.root, text="Save", command=self.save).pack(pady=10)
        self.status = tk.Label(self.root, text="")
        self.status.pack()

    def save(self) -> None:
        """The Save button: keep the title, or say that it is empty."""
        title = self.entry.get().strip()
        if not title:
            self.say("The title is empty.")
            return
        self.saved_title = title
        self.status.config(text=f"Saved '{title}'")

    def state(self) -> dict[str, Any]:
        return {"saved_title": self.saved_title, "title_field": self.entry.get()}


class PrefsApp(DesktopApp):
    """Two switches and an Apply button."""

    title = "Preferences"

    def build(self) -> None:
        self.applied: dict[str, bool] | None = None
        self.wifi = tk.IntVar(self.root, 1)
        self.bluetooth = tk.IntVar(self.root, 0)
        tk.Label(self.root, text="Connections").pack(pady=(20, 4))
        tk.Checkbutton(self.root, text="Wi-Fi", variable=self.wifi).pack()
        tk.Checkbutton(self.root, text="Bluetooth", variable=self.bluetooth).pack()
        tk.Button(self.root, text="Apply", command=self.apply).pack(pady=10)

    def current(self) -> dict[str, bool]:
        """The switches as they are now (applied or not)."""
        return {"wifi": bool(self.wifi.get()), "bluetooth": bool(self.bluetooth.get())}

    def apply(self) -> None:
        """The Apply button: the switches as they are now become the applied settings."""
        self.applied = self.current()

    def state(self) -> dict[str, Any]:
        return {"applied": self.applied, "current": self.current()}


APPS: dict[str, type[DesktopApp]] = {"notes": NotesApp, "prefs": PrefsApp}


def main(argv: list[str]) -> int:
    """Wait for ``STATE_DIR/app`` (``argv[0]``) to name an app, then run it on a screen of size ``argv[1]``
    (``800x600``), reporting to ``STATE_DIR``. Started ahead of its episode, so Python and Tk are loaded by the
    time the app is asked for; it exits if the env that started it goes away first."""
    state_dir, size = Path(argv[0]), argv[1]
    parent = os.getppid()
    while not (state_dir / "app").exists():
        if os.getppid() != parent:
            return 0
        time.sleep(POLL_MS / 1000)
    root = tk.Tk()
    root.geometry(f"{size}+0+0")
    app = APPS[(state_dir / "app").read_text().strip()](root, state_dir)
    root.after(POLL_MS, app.poll)
    root.mainloop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
