"""Test helpers for the keyless servers' ``Host`` and ``Origin`` rules (:func:`claw_train.access.stranger`), shared by
``tests/test_view.py`` and ``tests/security/test_serve_security.py``: a name whose DNS answers 127.0.0.1, as a
rebinding attacker's domain does, and a raw request without a ``Host`` header."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

HOSTS = "/etc/hosts"
ANSWERED = "localhost, *.localhost, 127.x.x.x or [::1]"
"""What every refusal names as the hosts answered."""


@dataclass
class Rebound:
    """A name that resolves to 127.0.0.1; ``lookups``: the resolver calls this process made for it."""

    name: str
    lookups: list[Any] = field(default_factory=list)


@contextlib.contextmanager
def rebound_name() -> Iterator[Rebound]:
    """A fresh ``claw-rebind-<random>.test`` that resolves to 127.0.0.1: an /etc/hosts entry (removed after) where
    the file is writable, else ``socket.getaddrinfo`` answering so in this process. Either way every lookup of it
    here is recorded (the servers under test run in this process and must make none)."""
    rebound = Rebound(f"claw-rebind-{uuid.uuid4().hex[:12]}.test")
    real_getaddrinfo, real_gethostbyname = socket.getaddrinfo, socket.gethostbyname
    line = f"127.0.0.1 {rebound.name}\n"
    try:
        with open(HOSTS, "a") as hosts:
            hosts.write(line)
        in_hosts = True
    except OSError:
        in_hosts = False

    def named(host: Any) -> bool:
        text = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
        if text.rstrip(".").lower() != rebound.name:
            return False
        rebound.lookups.append(host)
        return not in_hosts  # answered here, not by /etc/hosts

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real_getaddrinfo("127.0.0.1" if named(host) else host, *args, **kwargs)

    def gethostbyname(host: Any) -> str:
        return "127.0.0.1" if named(host) else real_gethostbyname(host)

    socket.getaddrinfo, socket.gethostbyname = getaddrinfo, gethostbyname  # type: ignore[assignment]
    try:
        found = {info[4][0] for info in socket.getaddrinfo(rebound.name, None, proto=socket.IPPROTO_TCP)}
        assert found and all(ipaddress.ip_address(a).is_loopback for a in found), found  # it does resolve
        rebound.lookups.clear()
        yield rebound
    finally:
        socket.getaddrinfo, socket.gethostbyname = real_getaddrinfo, real_gethostbyname  # type: ignore[assignment]
        if in_hosts:
            with open(HOSTS) as hosts:
                kept = [entry for entry in hosts.readlines() if entry != line]
            with open(HOSTS, "w") as hosts:
                hosts.writelines(kept)


def status_without_host(port: int, path: str) -> int:
    """The status of an HTTP/1.0 ``GET path`` that sends no ``Host`` header (HTTP/1.1 requires one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        reply = b""
        while data := sock.recv(65536):
            reply += data
    return int(reply.split(b" ", 2)[1])
