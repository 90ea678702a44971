"""A judge behind any OpenAI-compatible chat endpoint (SGLang, vLLM, a hosted API), over plain httpx."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import httpx

from judges.backends.base import BackendError, JudgeRequest, ResilientBackend
from judges.metrics import JudgeMetrics

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def normalize_base_url(spec: str) -> str:
    """``openai://HOST:PORT[/v1]`` → ``http://HOST:PORT/v1`` (``openai+https://`` → ``https://``);
    ``http(s)://…`` keeps its scheme; ``/v1`` is added if absent."""
    url = spec.strip()
    for prefix, scheme in (("openai://", "http://"), ("openai+https://", "https://")):
        if url.startswith(prefix):
            url = scheme + url.removeprefix(prefix)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"judge endpoint {spec!r} is not openai://HOST:PORT[/v1] or http(s)://HOST[:PORT]/v1")
    try:
        _ = parts.port  # raises on a malformed port
    except ValueError as err:
        raise ValueError(f"judge endpoint {spec!r} has a bad port: {err}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


class OpenAIBackend(ResilientBackend):
    """POSTs ``/chat/completions`` once per vote and returns the first choice's message text.

    Images in the prompt travel as ``image_url`` parts with data URLs (rendered by :mod:`judges.prompts`).
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "default",
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        failure_threshold: int = 5,
        reset_after: float = 30.0,
        metrics: JudgeMetrics | None = None,
    ):
        super().__init__(
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            failure_threshold=failure_threshold,
            reset_after=reset_after,
            metrics=metrics,
        )
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        """One client per event loop (a pooled connection must not outlive the loop that opened it)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=self.timeout)
            self._client_loop = loop
        return self._client

    async def _attempt(self, request: JudgeRequest) -> str:
        body = {
            "model": self.model,
            "messages": request.messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
            "n": 1,
        }
        try:
            response = await self._http().post("/chat/completions", json=body)
        except httpx.TimeoutException as err:
            raise BackendError("timeout", f"{type(err).__name__} from {self.base_url}", retryable=True) from None
        except httpx.TransportError as err:
            raise BackendError("connection", f"{self.base_url}: {type(err).__name__}: {err}", retryable=True) from None
        if response.status_code != 200:
            snippet = response.text[:200].replace("\n", " ")
            raise BackendError(
                "http",
                f"HTTP {response.status_code} from {self.base_url}/chat/completions: {snippet}",
                retryable=response.status_code in RETRYABLE_STATUS,
            )
        return _message_text(response)

    async def reachable(self) -> str | None:
        """GET ``/models``: any HTTP answer means the server is there (a 401 says the key is wrong)."""
        try:
            response = await self._http().get("/models", timeout=min(self.timeout, 10.0))
        except httpx.TransportError as err:
            return f"{self.base_url} is unreachable: {type(err).__name__}: {err}"
        if response.status_code in (401, 403):
            return f"{self.base_url} refused the API key (HTTP {response.status_code}); set CLAW_JUDGE_API_KEY"
        return None

    async def aclose(self) -> None:
        if self._client is not None and not self._client.is_closed:
            await self._client.aclose()
        self._client = None


def _message_text(response: httpx.Response) -> str:
    """The first choice's content; anything that is not a chat-completions body is ``malformed``."""
    try:
        data: Any = response.json()
        content = data["choices"][0]["message"]["content"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as err:
        raise BackendError(
            "malformed", f"not a chat-completions body ({type(err).__name__}): {response.text[:120]!r}", retryable=True
        ) from None
    if content is None:  # legal (e.g. a reasoning model cut off): an empty answer, i.e. an invalid vote
        content = ""
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        raise BackendError("malformed", f"message content is {type(content).__name__}, not text", retryable=True)
    return content
