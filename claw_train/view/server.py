"""Running ``claw-view``: the indexes kept fresh by one background thread (:class:`Refresher`), served by uvicorn on
a socket bound here (:func:`serve`)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Sequence

from claw_train.view.runs import RunIndex

POLL_SECONDS = 1.0


class Refresher:
    """Reads what the runs wrote every ``every`` seconds, in a daemon thread at a lower CPU priority than the run it
    watches (on Linux ``nice`` applies per thread)."""

    def __init__(self, runs: Sequence[RunIndex], every: float = POLL_SECONDS):
        self.runs = list(runs)
        self.every = every
        self.first_pass = threading.Event()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="claw-view-refresh", daemon=True)

    def start(self) -> Refresher:
        """Start the thread (the first pass indexes everything already on disk)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (after its current pass)."""
        self._stop.set()
        self._thread.join(timeout=30)

    def _main(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: same priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stop.is_set():
            for run in self.runs:
                try:
                    run.refresh()
                except Exception as err:  # a file the run is rewriting: say so, try again next pass
                    self.errors.append(f"{run.label}: {type(err).__name__}: {err}")
                    del self.errors[:-20]
            self.first_pass.set()
            self._stop.wait(self.every)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: any free one); a port in use is an ``OSError`` saying so."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(64)
    return sock


class ViewServer:
    """The page over ``runs`` on ``sock``: :meth:`run` blocks until Ctrl-C (the command), :meth:`start` serves from a
    thread until :meth:`stop` (tests, a run's ``--view``)."""

    def __init__(self, runs: Sequence[RunIndex], sock: socket.socket, *, key: str = "", every: float = POLL_SECONDS):
        import uvicorn

        from claw_train.view.app import create_app

        self.runs, self.sock = list(runs), sock
        self.refresher = Refresher(runs, every)
        config = uvicorn.Config(create_app(runs, key=key), log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        host, port = sock.getsockname()[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        self._thread: threading.Thread | None = None

    def run(self, on_ready: Callable[[str], None] = print) -> None:
        """Serve until interrupted; ``on_ready(url)`` once it accepts requests."""
        import asyncio

        async def main() -> None:
            task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
            while not self.server.started and not task.done():
                await asyncio.sleep(0.02)
            if self.server.started:
                on_ready(self.url)
            await task

        self.refresher.start()
        try:
            asyncio.run(main())
        finally:
            self.refresher.stop()
            self.sock.close()

    def start(self, timeout: float = 30.0) -> str:
        """Serve from a daemon thread; returns the URL once it answers."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self.run, args=(lambda _url: ready.set(),), daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"claw-view did not start within {timeout:g} s")
        return self.url

    def stop(self) -> None:
        """Stop serving (and the refresher) and wait for the thread."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
