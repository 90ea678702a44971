"""Where agent actions run: ``make_sandbox("local")`` (bubblewrap + rlimits) or ``make_sandbox("docker")``.

Both backends implement :class:`Sandbox`: ``run(cmd, timeout, env, cwd, stdin) -> ExecResult``,
``read_file``, ``write_file``, ``close``. Whatever a command does comes back as an ``ExecResult``;
:class:`SandboxError` means the sandbox itself failed (an infrastructure failure). The local backend fails closed:
where bubblewrap cannot run it refuses to start, unless rlimits-only isolation was opted in
(:mod:`claw_envs.sandbox.isolation`).
"""

from __future__ import annotations

from typing import Any

from claw_envs.sandbox.base import Bind, ExecResult, Sandbox, SandboxError, Spawned
from claw_envs.sandbox.local import LocalSandbox

KINDS = ("local", "docker")


def make_sandbox(kind: str = "local", **kwargs: Any) -> Sandbox:
    """A new sandbox of ``kind`` (``"local"`` or ``"docker"``); ``kwargs`` go to its constructor."""
    if kind == "local":
        return LocalSandbox(**kwargs)
    if kind == "docker":
        from claw_envs.sandbox.docker import DockerSandbox

        return DockerSandbox(**kwargs)
    raise ValueError(f"unknown sandbox kind {kind!r}; choose one of {', '.join(KINDS)}")


__all__ = ["KINDS", "Bind", "ExecResult", "LocalSandbox", "Sandbox", "SandboxError", "Spawned", "make_sandbox"]
