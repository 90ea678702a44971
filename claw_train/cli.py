"""Console entry points. Each command lives in its own module and is imported only when run,
so ``claw-envs list`` starts without loading torch or trl."""

from __future__ import annotations

import importlib
import os
import sys


def _run(module: str, entry: str = "app") -> None:
    """Run ``module``'s ``entry()``; output piped into a reader that stops early (``--help | head``) ends the command
    quietly instead of with a traceback."""
    try:
        code = getattr(importlib.import_module(module), entry)()
        if code:
            sys.exit(code)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python would flush into the closed pipe
        sys.exit(1)


def train() -> None:
    """``claw-train``: learn online from next-state signals."""
    _run("claw_train.commands.train")


def evaluate() -> None:
    """``claw-eval``: score a policy on held-out tasks."""
    _run("claw_train.commands.evaluate")


def serve() -> None:
    """``claw-serve``: an OpenAI-compatible server that learns from live conversations."""
    _run("claw_train.commands.serve")


def envs() -> None:
    """``claw-envs``: list, try and judge environments."""
    _run("claw_train.commands.envs", "main")


def view() -> None:
    """``claw-view``: a web page over run folders, live while they run."""
    _run("claw_train.commands.view")
