"""Running ``claw-view``: the indexes kept fresh by one background thread (:class:`Refresher`), served by uvicorn on
a socket bound here (:func:`serve`)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Sequence

from claw_train.view.index import RunIndex

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


def serve(
    runs: Sequence[RunIndex], sock: socket.socket, *, key: str = "", on_ready: Callable[[str], None] = print
) -> None:
    """Serve the page over ``runs`` on ``sock`` until interrupted; ``on_ready(url)`` once it accepts requests."""
    import asyncio

    import uvicorn

    from claw_train.view.app import create_app

    refresher = Refresher(runs).start()
    config = uvicorn.Config(create_app(runs, key=key), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            host, port = sock.getsockname()[:2]
            on_ready(f"http://{'[' + host + ']' if ':' in host else host}:{port}/")
        await task

    try:
        asyncio.run(main())
    finally:
        refresher.stop()
        sock.close()
