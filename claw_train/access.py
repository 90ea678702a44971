"""Who may reach ``claw-serve`` and ``claw-view``, alike.

Listening: a loopback address by default, and an API key for any other, since whoever reaches the port could use
(and, for claw-serve, train) what it serves (:func:`refusal`; the address is the user's own choice, so a name is
resolved there).

Answering without a key (:func:`stranger`): only a request whose ``Host`` names this machine by its letters alone —
``localhost`` or ``*.localhost`` (any case, one trailing dot allowed), ``127.x.x.x`` in canonical dotted-quad form or
``[::1]``, with or without a port — and whose ``Origin``, when it has one, is such a host on the server's own port.
No name is ever looked up: a domain whose DNS answers 127.0.0.1 (DNS rebinding), ``0.0.0.0``, ``127.1``, an
IPv4-mapped address and ``Origin: null`` are refused, so a web page the user opens can neither read nor drive a
keyless server.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any

API_KEY_ENV = "CLAW_API_KEY"
ANSWERED = "localhost, *.localhost, 127.x.x.x or [::1]"
"""The hosts a keyless server answers, as its refusals name them."""

_NAME = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*localhost\.?", re.ASCII)
_AUTHORITY = re.compile(r"(\[[^\[\]]*\]|[^\[\]:/]*)(?::(\d{1,5}))?", re.ASCII)
_ORIGIN = re.compile(r"(https?)://" + _AUTHORITY.pattern, re.ASCII | re.IGNORECASE)
_DEFAULT_PORT = {"http": 80, "https": 443}


def api_key(given: str) -> str:
    """The key clients must send: ``given`` (``--api-key``), else ``$CLAW_API_KEY``; empty: none."""
    return given or os.environ.get(API_KEY_ENV, "")


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (a name that does not resolve is not). Resolves names:
    for the address to listen on only, never for a request's ``Host``."""
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


def loopback_literal(host: str) -> bool:
    """Whether ``host`` (no port) names this machine by its letters alone: ``localhost``, ``*.localhost``, a
    canonical ``127.x.x.x`` or ``[::1]``. Never resolves anything."""
    if not host.isascii():
        return False
    if host == "[::1]" or _NAME.fullmatch(host.lower()):
        return True
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return address.is_loopback and str(address) == host


def stranger(scope: Mapping[str, Any]) -> str | None:
    """Why a keyless server refuses the ASGI request ``scope`` (``None``: answer it): a ``Host`` that is not a
    loopback literal (:func:`loopback_literal`, any port), or an ``Origin`` that is not one on the port in the
    scope's ``server``."""
    hosts = _header(scope.get("headers", ()), b"host")
    authority = _AUTHORITY.fullmatch(hosts[0]) if len(hosts) == 1 else None
    if authority is None or not loopback_literal(authority[1]):
        shown = ", ".join(repr(h[:100]) for h in hosts) or "none"
        return f"without an API key only Host {ANSWERED} is answered (any port), not Host {shown}"
    server = scope.get("server")
    port = server[1] if server else None
    for origin in _header(scope.get("headers", ()), b"origin"):
        if not _loopback_origin(origin, port):
            return (
                f"without an API key only pages of {ANSWERED} on port {port} are answered, not Origin {origin[:100]!r}"
            )
    return None


def _loopback_origin(origin: str, port: int | None) -> bool:
    """Whether ``origin`` is ``http(s)://`` a loopback literal on ``port`` (``null`` and the like are not)."""
    found = _ORIGIN.fullmatch(origin)
    return bool(found) and loopback_literal(found[2]) and int(found[3] or _DEFAULT_PORT[found[1].lower()]) == port


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[str]:
    """Every value of the header ``name`` (lower case) in ASGI ``headers``."""
    return [value.decode("latin-1").strip() for key, value in headers if key.lower() == name]
