"""Who may listen where (``claw-serve`` and ``claw-view`` alike): a loopback address by default, and an API key for
any other, since whoever reaches the port could use (and, for claw-serve, train) what it serves."""

from __future__ import annotations

import ipaddress
import os
import socket

API_KEY_ENV = "CLAW_API_KEY"


def api_key(given: str) -> str:
    """The key clients must send: ``given`` (``--api-key``), else ``$CLAW_API_KEY``; empty: none."""
    return given or os.environ.get(API_KEY_ENV, "")


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (a name that does not resolve is not)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def refusal(host: str, key: str, *, exposes: str) -> str | None:
    """Why listening on ``host`` without ``key`` is refused (``None``: it is allowed); ``exposes`` says what anyone
    reaching the port could do."""
    if key or is_loopback(host):
        return None
    return (
        f"refusing to listen on {host or 'every address'!r} without an API key: anyone who can reach the port "
        f"could {exposes}. Set ${API_KEY_ENV} (or --api-key) to a secret, or listen on 127.0.0.1 (the default)"
    )
