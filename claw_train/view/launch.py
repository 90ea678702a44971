"""``claw-train --view`` / ``claw-serve --view``: claw-view in a process of its own beside the run, at a lower CPU
priority, on a free loopback port; it ends with the run (and with it, should the run be killed)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT = 60.0


class Beside:
    """A running claw-view over one run folder: its :attr:`url`, :meth:`close` to stop it."""

    def __init__(self, run_dir: Path, *, timeout: float = START_TIMEOUT):
        command = [sys.executable, "-c", "from claw_train.cli import view; view()", str(run_dir), "--port", "0"]
        env = {k: v for k, v in os.environ.items() if k != "CLAW_API_KEY"}  # loopback, and the key stays the run's
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_behind_the_run
        )
        self.url = self._read_url(timeout)

    def _read_url(self, timeout: float) -> str:
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if selector.select(timeout=0.2):
                line = self.proc.stdout.readline()
                if line.startswith("claw-view: http"):
                    return line.split()[1]
        self.close()
        error = self.proc.stderr.read().strip() if self.proc.stderr else ""
        raise RuntimeError(f"claw-view did not start: {error or f'no URL within {timeout:g} s'}")

    def close(self) -> None:
        """Stop the page's server."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _behind_the_run() -> None:
    """In the child before it runs: a lower priority than the run, and a SIGTERM when the run's process dies."""
    with contextlib.suppress(OSError):
        os.nice(10)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
