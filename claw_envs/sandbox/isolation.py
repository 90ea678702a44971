"""Which isolation a local sandbox runs under, and why it refuses to run without any.

Fail closed: a sandbox that cannot isolate its commands with bubblewrap refuses to start, with one line naming the
cause and the fix (:func:`no_bubblewrap`, :func:`bubblewrap_refused`). Running with rlimits only (no namespaces:
commands act with this user's rights, see every file the user can, reach the network) is an explicit opt-in:
``LocalSandbox(isolation="rlimits")``, or ``CLAW_SANDBOX_ISOLATION=rlimits`` for the whole process (what
``--sandbox-isolation rlimits`` of ``claw-train``, ``claw-eval`` and ``claw-serve`` sets).
"""

from __future__ import annotations

import os
from typing import Literal

from claw_envs.sandbox.base import SandboxError

ISOLATION_ENV = "CLAW_SANDBOX_ISOLATION"
CHOICES = ("auto", "bwrap", "rlimits")
Isolation = Literal["bwrap", "rlimits"]

_OPT_IN = f"opt in to rlimits only (no namespace isolation) with {ISOLATION_ENV}=rlimits (--sandbox-isolation rlimits)"
_KERNEL_FIX = (
    "allow unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ "
    "kernel.apparmor_restrict_unprivileged_userns=0; user.max_user_namespaces > 0)"
)


def requested(isolation: str = "auto") -> Isolation:
    """What ``isolation`` asks for; ``"auto"`` is the process's choice, ``$CLAW_SANDBOX_ISOLATION`` (auto, bwrap or
    rlimits; unset or auto: bwrap). A ``ValueError`` names a bad value."""
    if isolation not in CHOICES:
        raise ValueError(f"isolation must be 'auto', 'bwrap' or 'rlimits', got {isolation!r}")
    if isolation != "auto":
        return "rlimits" if isolation == "rlimits" else "bwrap"
    value = os.environ.get(ISOLATION_ENV, "").strip() or "auto"
    if value not in CHOICES:
        raise ValueError(f"${ISOLATION_ENV} must be auto, bwrap or rlimits, got {value!r}")
    return "rlimits" if value == "rlimits" else "bwrap"


def opted_in_with(isolation: str) -> str:
    """How reduced isolation was asked for, as a warning or a summary says it."""
    return f"isolation={isolation!r}" if isolation != "auto" else f"{ISOLATION_ENV}=rlimits"


def no_bubblewrap() -> SandboxError:
    """The refusal where bubblewrap is not installed."""
    return _refusal("bubblewrap (bwrap) is not installed (not on PATH)", "apt-get install bubblewrap")


def bubblewrap_refused(reason: str) -> SandboxError:
    """The refusal where bubblewrap could not start a sandbox; ``reason`` is its stderr (its first line is said)."""
    first = next((line.strip() for line in reason.splitlines() if line.strip()), "no message")
    if "namespace" in first.lower():
        return _refusal(f"bubblewrap was refused by the kernel ({first})", _KERNEL_FIX)
    return _refusal(f"bubblewrap cannot start a sandbox here ({first})", "repair or reinstall bubblewrap")


def _refusal(cause: str, fix: str) -> SandboxError:
    return SandboxError(
        f"LocalSandbox refuses to run commands without isolation: {cause}; fix: {fix}, use sandbox='docker', "
        f"or {_OPT_IN}"
    )
