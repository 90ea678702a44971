"""JSON over HTTP for the remote backends: retries on connection errors, clear ``PolicyError`` otherwise."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from typing import Any

import httpx

from claw_envs.retry import delay, retry_sync
from claw_train.policy.base import PolicyError

RETRYABLE = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class Servers:
    """Round-robin over server URLs; a request that cannot connect moves on to the next server."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout: float = 600.0,
        retries: int = 3,
        backoff: float = 0.25,
        headers: dict[str, str] | None = None,
    ):
        urls = [u.rstrip("/") for u in urls]
        if not urls:
            raise PolicyError("no server URLs given")
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise PolicyError(f"server URL {u!r} must start with http:// or https://")
        self.urls = urls
        self.retries = max(0, retries)
        self.backoff = backoff
        self._turn = itertools.count()
        self._client = httpx.AsyncClient(timeout=timeout, headers=headers)
        self._sync = httpx.Client(timeout=timeout, headers=headers)

    def _order(self) -> list[str]:
        start = next(self._turn) % len(self.urls)
        return self.urls[start:] + self.urls[:start]

    async def request(self, method: str, path: str, payload: Any = None, *, url: str | None = None) -> Any:
        """Send to one server (``url``) or the next in turn, failing over on connection errors."""
        errors = []
        targets = [url] if url else self._order()
        tries = max(self.retries + 1, len(targets))
        for attempt in range(tries):
            base = targets[attempt % len(targets)]
            try:
                resp = await self._client.request(method, base + path, json=payload)
            except RETRYABLE as err:
                errors.append(f"{base}: {type(err).__name__}: {err}")
            except httpx.HTTPError as err:
                raise PolicyError(f"{method} {base}{path} failed: {type(err).__name__}: {err}") from err
            else:
                if resp.status_code < 500:
                    return decode(resp, f"{method} {base}{path}")
                errors.append(f"{base}: HTTP {resp.status_code}: {resp.text[:200]}")
            if (attempt + 1) % len(targets) == 0 and attempt + 1 < tries:  # each server failed once more: back off
                await asyncio.sleep(delay(attempt // len(targets), self.backoff))
        raise PolicyError(f"{method} {path}: no server answered: {'; '.join(errors)}")

    def request_sync(self, method: str, path: str, payload: Any = None, *, url: str) -> Any:
        """Blocking call to one server (weight updates, which run in the trainer's thread)."""

        def once() -> httpx.Response:
            return self._sync.request(method, url + path, json=payload)

        try:
            resp = retry_sync(
                once, retries=self.retries, backoff=self.backoff, retry_on=lambda e: isinstance(e, RETRYABLE)
            )
        except RETRYABLE as err:
            raise PolicyError(
                f"{method} {url}{path}: server unreachable after {self.retries + 1} tries: {type(err).__name__}: {err}"
            ) from err
        except httpx.HTTPError as err:
            raise PolicyError(f"{method} {url}{path} failed: {type(err).__name__}: {err}") from err
        return decode(resp, f"{method} {url}{path}")

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        await self._client.aclose()
        self._sync.close()


def decode(resp: httpx.Response, what: str) -> Any:
    """The JSON body of a 2xx response (empty: ``{}``, plain text: ``{"text": ...}``); else ``PolicyError``."""
    body = resp.text
    if resp.status_code >= 400:
        raise PolicyError(f"{what}: HTTP {resp.status_code}: {body[:500]}")
    if not body.strip():
        return {}
    if "json" not in resp.headers.get("content-type", "") and body.lstrip()[:1] not in ("{", "["):
        return {"text": body}
    try:
        return json.loads(body)
    except ValueError as err:
        raise PolicyError(f"{what}: malformed JSON in the reply ({err}): {body[:200]!r}") from err


def field(data: Any, *path: str | int, what: str) -> Any:
    """``data[path…]`` or a ``PolicyError`` naming the missing field."""
    cur = data
    for key in path:
        try:
            cur = cur[key]
        except (KeyError, IndexError, TypeError):
            shown = ".".join(str(p) for p in path)
            raise PolicyError(f"{what}: reply has no {shown!r}: {json.dumps(data)[:300]}") from None
    return cur
