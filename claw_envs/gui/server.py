"""A loopback HTTP server for the GUI apps: static files from one folder, on ``127.0.0.1`` and a free port.

One server per folder per process (:func:`serve`), started on first use in a daemon thread; requests are not
logged. The browser backend lets its pages reach this origin and nothing else.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

_SERVERS: dict[Path, http.server.ThreadingHTTPServer] = {}
_LOCK = threading.Lock()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, no request log, no caching (every episode sees the file as shipped)."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


def serve(root: str | Path) -> str:
    """The base URL (``http://127.0.0.1:PORT/``) of a server for the files under ``root``, started if needed."""
    folder = Path(root).resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder to serve: {folder}")
    with _LOCK:
        server = _SERVERS.get(folder)
        if server is None:
            handler = functools.partial(_QuietHandler, directory=str(folder))
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name=f"claw-gui-http-{folder.name}", daemon=True).start()
            _SERVERS[folder] = server
    return f"http://127.0.0.1:{server.server_address[1]}/"
