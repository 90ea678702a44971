"""One sandbox per episode, for families that run the agent's commands: made on first use (and prepared
once), closed when the episode ends; a sandbox that fails is closed and reported as a typed infrastructure
failure, so a trainer masks the step instead of blaming the agent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.sandbox import Sandbox, SandboxError, make_sandbox

T = TypeVar("T")
Prepare = Callable[[Sandbox], Awaitable[None]]


class EpisodeSandbox:
    """``make_sandbox(kind, **options)`` on first use (no network unless ``options`` says so)."""

    def __init__(self, kind: str = "local", options: Mapping[str, Any] | None = None):
        self.kind = kind
        self.options: dict[str, Any] = {"network": False, **(options or {})}
        self.current: Sandbox | None = None

    async def get(self, prepare: Prepare | None = None) -> Sandbox:
        """The episode's sandbox; a new one is handed to ``prepare`` first (if that raises, it is closed)."""
        if self.current is not None:
            return self.current
        try:
            sandbox = await asyncio.to_thread(make_sandbox, self.kind, **self.options)
        except (SandboxError, OSError) as err:
            raise InfraFailure(f"cannot start the sandbox: {err}", StepStatus.SANDBOX_FAILURE) from err
        self.current = sandbox
        if prepare is not None:
            try:
                await prepare(sandbox)
            except BaseException:
                self.close()
                raise
        return sandbox

    async def run(
        self, work: Callable[[Sandbox], Awaitable[T]], *, timeout: float, what: str = "", prepare: Prepare | None = None
    ) -> T:
        """``await work(sandbox)`` within ``timeout`` seconds; a sandbox error or no answer closes the sandbox and
        raises :class:`InfraFailure` (``what`` prefixes its message)."""
        sandbox = await self.get(prepare)
        try:
            return await asyncio.wait_for(work(sandbox), timeout=timeout)
        except SandboxError as err:
            self.close()
            raise InfraFailure(f"{what}the sandbox failed: {err}", StepStatus.SANDBOX_FAILURE) from err
        except TimeoutError as err:
            self.close()
            raise InfraFailure(f"{what}the sandbox did not return", StepStatus.SANDBOX_FAILURE) from err

    def close(self) -> None:
        """Close the sandbox (the next :meth:`get` makes a new one)."""
        if self.current is not None:
            sandbox, self.current = self.current, None
            sandbox.close()
