"""The ``desktop`` backend: a real X server (Xvfb) the backend starts and stops itself, a Tk app of ours on it,
and pyautogui moving the real pointer and keyboard.

Xvfb picks a free display number itself (``-displayfd``) and listens on no TCP port. X clients need an existing
``XAUTHORITY`` file, so the backend makes an empty one; ``DISPLAY`` and ``XAUTHORITY`` are given to the app's
process and set only briefly in this process, while pyautogui is first imported (it opens its display then).
pyautogui talks to one display per process, so every call swaps in this backend's own display connection under a
process-wide lock. Screenshots are grabbed from the display with Pillow. Each episode runs the task's app in a
new process (:mod:`.desktop_apps`), started during the previous episode and told which app to be at reset;
closing kills the apps and Xvfb.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.gui.ops import KEY_NAMES, ActionError, Op
from claw_envs.gui.screen import Element, Screen, tree_text

_PYAUTOGUI_LOCK = threading.Lock()
_PYAUTOGUI_KEYS = {v: k for k, v in reversed(KEY_NAMES.items())}  # Playwright name -> pyautogui name
_PYAUTOGUI_KEYS.update({"Enter": "enter", "Control": "ctrl", "Escape": "esc", "Meta": "win", " ": "space"})
DESKTOP_FAILURE = StepStatus.BROWSER_FAILURE  # the typed status of a broken screen, desktop or browser


class DesktopBackend:
    """Xvfb + a Tk app + pyautogui (see the module docstring); ``timeout`` bounds every wait on the app."""

    kind = "desktop"

    def __init__(self, viewport: tuple[int, int] = (800, 600), *, timeout: float = 10.0):
        self.viewport = viewport
        self.timeout = timeout
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._display = ""
        self._xdisplay: Any = None
        self._tmp: Path | None = None
        self._app: subprocess.Popen[bytes] | None = None
        self._state_dir: Path | None = None
        self._request = 0
        self._report: dict[str, Any] = {}
        self._seen_messages = 0
        self._spare: tuple[subprocess.Popen[bytes], Path] | None = None
        self._live: set[subprocess.Popen[bytes]] = set()
        # processes still running when the backend is dropped or Python exits without aclose() are killed then
        weakref.finalize(self, _kill_all, self._live)

    # -- the X server ----------------------------------------------------------------------------------

    def _start_xvfb(self) -> None:
        if self._xvfb is not None and self._xvfb.poll() is None:
            return
        if shutil.which("Xvfb") is None:
            raise InfraFailure("the desktop backend needs Xvfb (install the system package 'xvfb')", DESKTOP_FAILURE)
        self._tmp = Path(tempfile.mkdtemp(prefix="claw-desktop-"))
        (self._tmp / "Xauthority").touch()
        read, write = os.pipe()
        width, height = self.viewport
        try:
            self._xvfb = subprocess.Popen(
                ["Xvfb", "-displayfd", str(write), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"],
                pass_fds=(write,),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(write)
        self._live.add(self._xvfb)
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()  # Xvfb writes the display number once it accepts clients
        if not number.isdigit():
            self._stop_xvfb()
            raise InfraFailure("Xvfb did not start", DESKTOP_FAILURE)
        self._display = f":{number}"
        with self._x_environment():
            from Xlib.display import Display

            self._xdisplay = Display(self._display)

    @contextlib.contextmanager
    def _x_environment(self) -> Iterator[None]:
        """``DISPLAY``/``XAUTHORITY`` of this backend's server, set in this process only inside the block (python-xlib
        prints a warning on stdout about the empty authority file: it is swallowed)."""
        saved = {k: os.environ.get(k) for k in ("DISPLAY", "XAUTHORITY")}
        os.environ.update(self._env())
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _env(self) -> dict[str, str]:
        assert self._tmp is not None
        return {"DISPLAY": self._display, "XAUTHORITY": str(self._tmp / "Xauthority")}

    def _stop_xvfb(self) -> None:
        if self._xdisplay is not None:
            with contextlib.suppress(Exception):
                self._xdisplay.close()
            self._xdisplay = None
        if self._xvfb is not None:
            self._kill(self._xvfb)
            self._xvfb = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- lifecycle -------------------------------------------------------------------------------------

    async def open(self, app: str) -> None:
        """Start an episode: a new process of the Tk app ``app`` on this backend's X server."""
        from claw_envs.gui.desktop_apps import APPS

        if app not in APPS:
            raise ValueError(f"no desktop app {app!r} (there are {', '.join(sorted(APPS))})")
        await self.end_episode()
        await asyncio.to_thread(self._start_xvfb)
        spare, self._spare = self._spare, None
        if spare is None or spare[0].poll() is not None:
            spare = self._spawn()
        self._app, self._state_dir = spare
        (self._state_dir / "app.tmp").write_text(app)
        os.replace(self._state_dir / "app.tmp", self._state_dir / "app")
        self._spare = self._spawn()  # the next episode's process loads Python and Tk while this one runs
        self._seen_messages = 0
        await self._sync()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], Path]:
        """A new app process, waiting for the name of the app to run."""
        assert self._tmp is not None
        state_dir = Path(tempfile.mkdtemp(prefix="app-", dir=self._tmp))
        width, height = self.viewport
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw_envs.gui.desktop_apps", str(state_dir), f"{width}x{height}"],
            env={**os.environ, **self._env()},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._live.add(proc)
        return proc, state_dir

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        _kill(proc)
        self._live.discard(proc)

    async def end_episode(self) -> None:
        """Kill the episode's app (the X server stays up for the next one)."""
        if self._app is not None:
            self._kill(self._app)
            self._app = None
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None
        self._report = {}

    async def aclose(self) -> None:
        """Kill the app, the waiting spare and the X server."""
        await self.end_episode()
        if self._spare is not None:
            self._kill(self._spare[0])
            self._spare = None
        self._stop_xvfb()

    # -- observing -------------------------------------------------------------------------------------

    async def _sync(self) -> dict[str, Any]:
        """Ask the app for a report made after every input sent so far, and wait for it."""
        if self._app is None or self._state_dir is None:
            raise InfraFailure("no desktop app is running (the episode has not started)", DESKTOP_FAILURE)
        self._request += 1
        token = str(self._request)
        (self._state_dir / "request").write_text(token)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._app.poll() is not None:
                err = self._app.stderr.read().decode(errors="replace")[-500:] if self._app.stderr else ""
                raise InfraFailure(f"the desktop app exited (code {self._app.returncode}): {err}", DESKTOP_FAILURE)
            try:
                report = json.loads((self._state_dir / "state.json").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                report = {}
            if report.get("ack") == token:
                self._report = report
                return report
            await asyncio.sleep(0.02)
        raise InfraFailure(f"the desktop app did not answer within {self.timeout:g} s", DESKTOP_FAILURE)

    async def observe(self) -> Screen:
        """Screenshot of the X screen, the app's widget tree and its window title."""
        report = await self._sync()
        png = await asyncio.to_thread(self._grab)
        elements = {
            key: Element(key, str(v[0]), str(v[1]), (float(v[2]), float(v[3]), float(v[4]), float(v[5])))
            for key, v in dict(report.get("elements", {})).items()
        }
        posted = list(report.get("messages", []))
        messages, self._seen_messages = tuple(posted[self._seen_messages :]), len(posted)
        tree = tree_text(list(report.get("lines", [])))
        return Screen(png, tree, elements, "", str(report.get("title", "")), messages)

    def _grab(self) -> bytes:
        from PIL import ImageGrab

        image = ImageGrab.grab(xdisplay=self._display)
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG", compress_level=1)
        return buffer.getvalue()

    async def app_state(self) -> Any:
        """The app's real state (what the task's check reads)."""
        return (await self._sync()).get("state")

    def take_blocked(self) -> list[str]:
        """Nothing is ever fetched on the desktop: always empty."""
        return []

    # -- acting ----------------------------------------------------------------------------------------

    async def perform(self, op: Op, screen: Screen) -> None:
        """Carry out one op with pyautogui; raises :class:`ActionError` when it targeted nothing."""
        calls = self._calls(op, screen)
        await asyncio.to_thread(self._run, calls)
        if op.name == "wait":
            await asyncio.sleep(op.args["seconds"])

    def _calls(self, op: Op, screen: Screen) -> list[Callable[[Any], Any]]:
        a = op.args
        if op.name in ("goto", "select_option"):
            raise ActionError(f"{op.name} works on web pages only; this is a desktop app", "bad_argument")
        if "bid" in a:
            element = screen.elements.get(a["bid"])
            if element is None:
                raise ActionError(
                    f"there is no element [{a['bid']}] on the screen; use an id from the tree", "no_target"
                )
            x, y = element.center
            return self._element_calls(op, x, y)
        point = self._point(a) if a.get("x") is not None else None
        name = op.name
        if name == "mouse_click":
            return [lambda g: g.click(*(point or ()), clicks=a["clicks"], button=a["button"])]
        if name == "mouse_move":
            return [lambda g: g.moveTo(*point)]
        if name in ("mouse_down", "mouse_up"):
            method = "mouseDown" if name == "mouse_down" else "mouseUp"
            return [lambda g: getattr(g, method)(*(point or ()), button=a["button"])]
        if name == "drag_to":
            return [lambda g: g.dragTo(*point, duration=0.2, button=a["button"])]
        if name == "wheel":
            return [lambda g: g.scroll(int(a["clicks"]), *(point or ()))]
        if name == "scroll":
            return [lambda g: g.scroll(-int(a["dy"] / 100)), lambda g: g.hscroll(int(a["dx"] / 100))]
        if name == "type_text":
            return [lambda g: g.write(a["text"])]
        if name in ("key_press", "hotkey"):
            return [lambda g: g.hotkey(*[_PYAUTOGUI_KEYS.get(k, k.lower()) for k in a["keys"]])]
        if name in ("key_down", "key_up"):
            method = "keyDown" if name == "key_down" else "keyUp"
            return [lambda g: getattr(g, method)(_PYAUTOGUI_KEYS.get(a["key"], a["key"].lower()))]
        return []  # wait, done, fail, send_msg_to_user: nothing on the screen

    def _element_calls(self, op: Op, x: int, y: int) -> list[Callable[[Any], Any]]:
        a = op.args
        keys = [_PYAUTOGUI_KEYS.get(k, k.lower()) for k in a.get("keys", [])]
        calls: dict[str, list[Callable[[Any], Any]]] = {
            "click": [lambda g: g.click(x, y, button=a.get("button", "left"))],
            "dblclick": [lambda g: g.doubleClick(x, y)],
            "hover": [lambda g: g.moveTo(x, y)],
            "focus": [lambda g: g.click(x, y)],
            # a triple click selects an entry's whole text; typing replaces the selection
            "fill": [
                lambda g: g.tripleClick(x, y),
                lambda g: g.write(a["value"]) if a["value"] else g.press("backspace"),
            ],
            "clear": [lambda g: g.tripleClick(x, y), lambda g: g.press("backspace")],
            "press": [lambda g: g.click(x, y), lambda g: g.hotkey(*keys)],
        }
        return calls[op.name]

    def _point(self, a: dict[str, Any] | Any) -> tuple[int, int]:
        width, height = self.viewport
        x, y = a["x"], a["y"]
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(f"({x:g}, {y:g}) is off the screen, which is {width}x{height} pixels", "off_screen")
        return int(x), int(y)

    def _run(self, calls: list[Callable[[Any], Any]]) -> None:
        with _PYAUTOGUI_LOCK:
            with self._x_environment():
                import pyautogui
                from pyautogui import _pyautogui_x11 as x11

            pyautogui.FAILSAFE = False  # the corner of a virtual screen is no emergency exit
            pyautogui.PAUSE = 0.02
            x11._display = self._xdisplay
            for call in calls:
                call(pyautogui)
            self._xdisplay.sync()


def _kill_all(procs: set[subprocess.Popen[bytes]]) -> None:
    """Kill every process in ``procs`` (Xvfb and the apps of a backend that was not closed)."""
    for proc in list(procs):
        _kill(proc)
    procs.clear()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process group we started and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
