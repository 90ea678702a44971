"""The ``browser`` backend: the system Chromium, headless, driven by Playwright.

One browser per backend (one per env, so one per pool worker), one fresh browser context per episode, so a
reset is a new context (made in the background while the previous episode ran) and a page load (no cookies,
storage or history carried over). Every request a page makes goes through a route handler that lets through
only the task's own origin (the loopback server, or ``file://`` paths inside the task's folder); anything
else is aborted and reported to the agent. Every call into the browser has a deadline: a page that hangs or a
renderer that crashes is an :class:`~claw_envs.core.InfraFailure` (``browser_failure``), and the next episode
starts on a clean context (a new browser if the old one died).

Playwright is imported only when the first browser starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urljoin, urlparse

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.gui.ops import ActionError, Op
from claw_envs.gui.screen import Element, Screen, tree_text

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
)
READ_STATE_JS = "window.clawState ? window.clawState() : null"
TREE_JS = resources.files("claw_envs.gui").joinpath("tree.js").read_text(encoding="utf-8")
REQUEST_WAIT = 0.5
"""Seconds an observation waits for the requests an action started to end."""
_T = TypeVar("_T")


class BrowserBackend:
    """Chromium through Playwright (see the module docstring).

    ``viewport`` is the screen size in pixels, ``timeout`` the deadline in seconds of any one browser call
    (past it the page counts as hung), ``element_timeout`` how long an element action waits for its target
    to be visible and enabled (past it the action failed: the agent's error).
    """

    kind = "browser"

    def __init__(
        self,
        viewport: tuple[int, int] = (800, 600),
        *,
        timeout: float = 10.0,
        element_timeout: float = 1.5,
        executable: str = CHROMIUM,
    ):
        self.viewport = viewport
        self.timeout = timeout
        self.element_timeout = element_timeout
        self.executable = executable
        self._playwright: Any = None
        self._browser: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: Any = None
        self._page: Any = None
        self._crashed = False
        self._origin = ""
        self._folder: Path | None = None
        self._mouse = (0.0, 0.0)
        self._closing: set[asyncio.Future[Any]] = set()
        self._spare: asyncio.Future[tuple[Any, Any]] | None = None
        self._in_flight: set[Any] = set()
        self.blocked: list[str] = []
        """Requests refused since the last :meth:`take_blocked` (URLs)."""

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def _ensure_browser(self) -> None:
        loop = asyncio.get_running_loop()
        if self._browser is not None and self._loop is loop and self._browser.is_connected():
            return
        await self._shutdown()
        try:
            from playwright.async_api import async_playwright
        except ImportError as err:  # the gui extra is not installed
            raise InfraFailure(
                "the GUI browser backend needs Playwright: pip install 'claw[gui]'", StepStatus.BROWSER_FAILURE
            ) from err
        if not Path(self.executable).exists():
            raise InfraFailure(
                f"no Chromium at {self.executable} (install the system package 'chromium')",
                StepStatus.BROWSER_FAILURE,
            )
        self._loop = loop
        self._spare = None
        self._playwright = await self._deadline(async_playwright().start(), "start Playwright", 60)
        self._browser = await self._deadline(
            self._playwright.chromium.launch(executable_path=self.executable, args=list(CHROMIUM_FLAGS), headless=True),
            "launch Chromium",
            60,
        )

    async def open(self, url: str, folder: Path | None = None) -> None:
        """Start an episode: a fresh context whose pages may reach only ``url``'s origin (or ``folder``)."""
        await self.end_episode()
        await self._ensure_browser()
        parsed = urlparse(url)
        self._origin = f"{parsed.scheme}://{parsed.netloc}/" if parsed.scheme in ("http", "https") else ""
        self._folder = folder.resolve() if folder is not None else None
        self._crashed = False
        self.blocked = []
        self._in_flight.clear()  # requests of the closed context never end
        self._mouse = (0.0, 0.0)
        spare, self._spare = self._spare, None
        fresh = None
        if spare is not None:
            with contextlib.suppress(Exception):  # a spare that failed: make one now
                fresh = await asyncio.wait_for(spare, self.timeout)
        self._context, self._page = fresh or await self._deadline(self._new_page(), "open a browser context")
        self._spare = asyncio.ensure_future(self._new_page())  # made while this episode runs
        await self._deadline(self._page.goto(url, wait_until="load"), f"load {url}")

    async def _new_page(self) -> tuple[Any, Any]:
        """A new context (guarded by the route handler) with its one page."""
        width, height = self.viewport
        context = await self._browser.new_context(
            viewport={"width": width, "height": height},
            device_scale_factor=1,
            service_workers="block",
            accept_downloads=False,
        )
        await context.route("**/*", self._route)
        page = await context.new_page()
        page.on("crash", self._on_crash)
        page.on("dialog", lambda dialog: self._background(dialog.dismiss()))
        context.on("page", self._on_popup)
        context.on("request", self._request_started)
        for ended in ("requestfinished", "requestfailed"):
            context.on(ended, self._request_ended)
        return context, page

    async def end_episode(self) -> None:
        """Close the episode's context (a hung one takes the browser with it; the next episode gets a new one)."""
        context, self._context, self._page = self._context, None, None
        if context is None:
            return
        try:
            await asyncio.wait_for(context.close(), 5.0)
        except Exception:  # a hung or crashed renderer: start over with a new browser
            await self._shutdown()

    async def aclose(self) -> None:
        """Close the browser and Playwright."""
        await self.end_episode()
        spare, self._spare = self._spare, None
        if spare is not None and asyncio.get_running_loop() is self._loop:
            with contextlib.suppress(Exception):
                context, _ = await asyncio.wait_for(spare, 5.0)
                await asyncio.wait_for(context.close(), 5.0)
        await self._shutdown()

    async def _shutdown(self) -> None:
        browser, playwright = self._browser, self._playwright
        self._browser = self._playwright = None
        if asyncio.get_running_loop() is not self._loop:
            return  # made on another (finished) loop: its process went away with that loop's driver
        for closer in (browser.close if browser else None, playwright.stop if playwright else None):
            if closer is not None:
                with contextlib.suppress(Exception):  # already gone
                    await asyncio.wait_for(closer(), 10.0)

    # -- guarding ------------------------------------------------------------------------------------

    def allowed(self, url: str) -> bool:
        """Whether a page may load ``url``: the task's origin, ``data:``/``blob:``, or a file inside its folder."""
        if url.startswith(("data:", "blob:", "about:blank")):
            return True
        if self._origin and url.startswith(self._origin):
            return True
        if url.startswith("file://") and self._folder is not None:
            path = Path(unquote(urlparse(url).path)).resolve()
            return path == self._folder or self._folder in path.parents
        return False

    async def _route(self, route: Any) -> None:
        url = route.request.url
        if self.allowed(url):
            await route.continue_()
        else:
            self.blocked.append(url)
            await route.abort("blockedbyclient")

    def _request_started(self, request: Any) -> None:
        self._in_flight.add(request)

    def _request_ended(self, request: Any) -> None:
        self._in_flight.discard(request)

    def _on_crash(self, _page: Any) -> None:
        self._crashed = True

    def _on_popup(self, page: Any) -> None:
        if (
            page is not self._page and page.context is self._context
        ):  # one page per episode: popups and new tabs are closed
            self._background(page.close())

    def _background(self, aw: Awaitable[Any]) -> None:
        """Run ``aw`` without waiting for it (a reference is kept until it is done)."""
        future = asyncio.ensure_future(aw)
        self._closing.add(future)
        future.add_done_callback(self._closing.discard)

    def take_blocked(self) -> list[str]:
        """The URLs refused since the last call (and forget them)."""
        out, self.blocked = self.blocked, []
        return out

    async def _deadline(self, aw: Awaitable[_T], what: str, seconds: float | None = None) -> _T:
        """Await ``aw`` within the deadline; a timeout or a dead page is a browser failure."""
        try:
            return await asyncio.wait_for(aw, seconds or self.timeout)
        except TimeoutError:
            raise InfraFailure(
                f"the browser did not {what} within {seconds or self.timeout:g} s (the page may hang)",
                StepStatus.BROWSER_FAILURE,
            ) from None
        except Exception as err:
            if _is_playwright_error(err) and self._dead(err):
                raise InfraFailure(
                    f"the browser failed to {what}: {_first_line(err)}", StepStatus.BROWSER_FAILURE
                ) from None
            raise

    def _dead(self, err: BaseException) -> bool:
        text = str(err).lower()
        return self._crashed or any(w in text for w in ("crash", "closed", "disconnected", "target page"))

    # -- observing -------------------------------------------------------------------------------------

    async def observe(self) -> Screen:
        """Screenshot, tree, URL and title of the page now (an action's navigation has already settled, and the
        requests it started have ended, or :data:`REQUEST_WAIT` passed)."""
        page = self._require_page()
        await self._requests_ended()
        for _ in range(3):  # a page a script sent away can still be loading when it is first read: read it again
            shot = asyncio.ensure_future(self._deadline(page.screenshot(type="png"), "take a screenshot"))
            try:
                data = await self._describe(page)
            finally:
                png = await shot  # taken while the tree was read (ids are attributes: nothing visible changes)
            if data.get("ready", "complete") == "complete":
                break
            await self._settle()
        elements = {
            key: Element(key, str(v[0]), str(v[1]), (float(v[2]), float(v[3]), float(v[4]), float(v[5])))
            for key, v in dict(data["elements"]).items()
        }
        messages = tuple(str(m) for m in data.get("messages") or [])
        return Screen(png, tree_text(list(data["lines"])), elements, page.url, str(data["title"]), messages)

    async def _requests_ended(self) -> None:
        """Wait, at most :data:`REQUEST_WAIT` seconds, until no request of the page is in flight (a refused one has
        been recorded in :attr:`blocked` by then; a long poll only costs the wait)."""
        deadline = asyncio.get_running_loop().time() + REQUEST_WAIT
        while self._in_flight and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def _describe(self, page: Any) -> dict[str, Any]:
        try:
            return await self._deadline(page.evaluate(TREE_JS), "describe the page")
        except InfraFailure:
            raise
        except Exception as err:
            if "context was destroyed" not in str(err).lower():
                raise InfraFailure(f"cannot read the page: {_first_line(err)}", StepStatus.BROWSER_FAILURE) from err
        return await self.evaluate(TREE_JS)  # the page navigated while it was read: read the new one

    async def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Run a JavaScript expression of ours (never the agent's) in the page: the app's state, MiniWoB's globals;
        a function expression is called with ``arg``."""
        page = self._require_page()
        await self._settle()
        try:
            return await self._deadline(page.evaluate(expression, arg), "read the page's state")
        except InfraFailure:
            raise
        except Exception as err:
            raise InfraFailure(f"cannot read the page's state: {_first_line(err)}", StepStatus.BROWSER_FAILURE) from err

    async def app_state(self) -> Any:
        """The app's real state, ``window.clawState()`` (what the task's check reads)."""
        return await self.evaluate(READ_STATE_JS)

    async def _settle(self) -> None:
        """Wait for a navigation the last action started to finish loading."""
        page = self._require_page()
        try:
            await asyncio.wait_for(page.wait_for_load_state("load"), self.timeout)
        except TimeoutError:
            raise InfraFailure(
                f"the page did not finish loading within {self.timeout:g} s", StepStatus.BROWSER_FAILURE
            ) from None
        except Exception as err:
            if self._dead(err):
                raise InfraFailure(f"the page is gone: {_first_line(err)}", StepStatus.BROWSER_FAILURE) from None

    def _require_page(self) -> Any:
        if self._page is None:
            raise InfraFailure("no page is open (the episode has not started)", StepStatus.BROWSER_FAILURE)
        if self._crashed:
            raise InfraFailure("the page's renderer crashed", StepStatus.BROWSER_FAILURE)
        return self._page

    # -- acting ----------------------------------------------------------------------------------------

    async def perform(self, op: Op, screen: Screen) -> None:
        """Carry out one op; raises :class:`ActionError` when it targeted nothing or could not be done."""
        page = self._require_page()
        a = op.args
        if op.name in ("click", "dblclick", "fill", "clear", "press", "select_option", "hover", "focus"):
            await self._element_op(page, op, screen)  # Playwright waits for a navigation it starts
        elif op.name == "scroll":
            if a.get("x") is not None:
                await self._move(page, a["x"], a["y"])
            await self._deadline(page.mouse.wheel(a["dx"], a["dy"]), "scroll")
        elif op.name == "goto":
            target = urljoin(page.url, a["url"])
            if not self.allowed(target) or target.startswith(("data:", "blob:", "about:")):  # no pages of its own
                raise ActionError(
                    f"navigation to {a['url']!r} is blocked: only the task's own pages can be opened", "blocked"
                )
            await self._deadline(page.goto(target, wait_until="load"), f"load {target}")
        elif op.name in ("mouse_click", "mouse_move", "mouse_down", "mouse_up", "drag_to", "wheel"):
            await self._mouse_op(page, op)
        elif op.name == "type_text":
            await self._deadline(page.keyboard.type(a["text"]), "type")
        elif op.name in ("key_press", "hotkey"):
            await self._deadline(page.keyboard.press("+".join(a["keys"])), "press keys")
        elif op.name in ("key_down", "key_up"):
            method = page.keyboard.down if op.name == "key_down" else page.keyboard.up
            await self._deadline(method(a["key"]), "press a key")
        elif op.name == "wait":
            await asyncio.sleep(a["seconds"])
        else:  # send_msg_to_user, done, fail: nothing happens on the page
            return
        if "bid" not in op.args:
            await asyncio.sleep(0.02)  # raw input: let the page's handlers start a navigation before it is read
        await self._settle()
        if not self.allowed(page.url):  # a link or script led off the task (the request itself was refused)
            if not self.blocked:
                self.blocked.append(page.url)
            await self._deadline(page.go_back(wait_until="load"), "go back to the task's page")

    async def _element_op(self, page: Any, op: Op, screen: Screen) -> None:
        bid = op.args["bid"]
        if bid not in screen.elements:
            raise ActionError(f"there is no element [{bid}] on the screen; use an id from the tree", "no_target")
        locator = page.locator(f'[data-claw-id="{bid}"]')
        ms = self.element_timeout * 1000
        a = op.args
        calls = {
            "click": lambda: locator.click(button=a.get("button", "left"), timeout=ms),
            "dblclick": lambda: locator.dblclick(timeout=ms),
            "fill": lambda: locator.fill(a.get("value", ""), timeout=ms),
            "clear": lambda: locator.clear(timeout=ms),
            "press": lambda: locator.press("+".join(a.get("keys", [])), timeout=ms),
            "select_option": lambda: locator.select_option(label=a.get("options"), timeout=ms),
            "hover": lambda: locator.hover(timeout=ms),
            "focus": lambda: locator.focus(timeout=ms),
        }
        started = time.monotonic()
        try:
            await self._deadline(calls[op.name](), f"{op.name} [{bid}]")
        except InfraFailure:
            raise
        except Exception as err:
            if not _is_playwright_error(err):
                raise
            reason = _first_line(err)
            if "timeout" in reason.lower() or time.monotonic() - started >= self.element_timeout:
                reason = "it did not become visible, enabled and uncovered in time"
            raise ActionError(f"{op.name} on [{bid}] failed: {reason}", "failed_on_target") from None

    async def _mouse_op(self, page: Any, op: Op) -> None:
        a = op.args
        if op.name == "drag_to":  # press where the mouse is, move to (x, y), release there
            await self._deadline(page.mouse.down(button=a["button"]), "start a drag")
            await self._move(page, a["x"], a["y"], steps=8)
            await self._deadline(page.mouse.up(button=a["button"]), "drop")
            return
        if a.get("x") is not None:
            await self._move(page, a["x"], a["y"])
        x, y = self._mouse
        if op.name == "mouse_click":
            await self._deadline(page.mouse.click(x, y, button=a["button"], click_count=a["clicks"]), "click")
        elif op.name == "mouse_down":
            await self._deadline(page.mouse.down(button=a["button"]), "press the mouse button")
        elif op.name == "mouse_up":
            await self._deadline(page.mouse.up(button=a["button"]), "release the mouse button")
        elif op.name == "wheel":
            await self._deadline(page.mouse.wheel(0, -a["clicks"] * 100), "scroll")

    async def _move(self, page: Any, x: float, y: float, steps: int = 4) -> None:
        width, height = self.viewport
        if not (0 <= x < width and 0 <= y < height):
            raise ActionError(f"({x:g}, {y:g}) is off the screen, which is {width}x{height} pixels", "off_screen")
        start = self._mouse
        self._mouse = (x, y)
        if start != (x, y):
            await self._deadline(page.mouse.move(x, y, steps=steps), "move the mouse")


def _is_playwright_error(err: BaseException) -> bool:
    return type(err).__module__.startswith("playwright")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__
