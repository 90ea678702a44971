"""``openai``: any OpenAI-compatible chat endpoint, for evaluation and judging only (no weight updates).

Chat messages go to ``/chat/completions`` (with ``logprobs`` when the server offers them); exact
prompt token ids go to ``/completions`` (vLLM and SGLang accept a list of ids as ``prompt``). Token
ids of the reply are not part of the OpenAI chat API, so ``Completion.token_ids`` is empty there: this
backend cannot feed a trainer, only measure a policy.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from claw_train.policy.base import Completion, Message, Policy, PolicyError, SamplingParams
from claw_train.policy.http import Servers, field


class OpenAIPolicy(Policy):
    """Chat completions from ``base_url`` (``http://host:port/v1``) for ``model``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        *,
        timeout: float = 600.0,
        retries: int = 3,
        backoff: float = 0.25,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.servers = Servers(
            [self.base_url],
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            headers={"Authorization": f"Bearer {api_key}"},
        )
        self._logprobs_offered = True

    async def generate(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        items = list(prompt)
        if not items:
            raise PolicyError("empty prompt")
        if all(isinstance(t, int) for t in items):
            return await self._complete_ids([int(t) for t in items], sampling)
        if not all(isinstance(m, Mapping) and "role" in m for m in items):
            raise PolicyError("prompt must be a list of token ids or a list of chat messages with a 'role'")
        payload: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in items], **_common(sampling)}
        if tools:
            payload["tools"] = list(tools)
        if self._logprobs_offered:
            try:
                data = await self.servers.request("POST", "/chat/completions", {**payload, "logprobs": True})
            except PolicyError as err:
                if "logprob" not in str(err).lower():
                    raise
                self._logprobs_offered = False  # the server refuses logprobs: ask without from now on
                data = await self.servers.request("POST", "/chat/completions", payload)
        else:
            data = await self.servers.request("POST", "/chat/completions", payload)
        what = "chat completion"
        choice = field(data, "choices", 0, what=what)
        message = field(choice, "message", what=what)
        text = _with_tool_calls(message.get("content") or "", message.get("tool_calls") or [])
        content_lps = ((choice.get("logprobs") or {}).get("content")) or []
        return Completion(
            text=text,
            token_ids=[],
            logprobs=[float(e.get("logprob", 0.0)) for e in content_lps if isinstance(e, Mapping)],
            finish_reason=_finish(choice.get("finish_reason")),
            policy_version=self.version,
        )

    async def _complete_ids(self, ids: list[int], sampling: SamplingParams) -> Completion:
        payload = {"model": self.model, "prompt": ids, "logprobs": 1, **_common(sampling)}
        data = await self.servers.request("POST", "/completions", payload)
        choice = field(data, "choices", 0, what="completion")
        lps = ((choice.get("logprobs") or {}).get("token_logprobs")) or []
        return Completion(
            text=str(field(choice, "text", what="completion")),
            token_ids=[],
            logprobs=[float(x) for x in lps if x is not None],
            finish_reason=_finish(choice.get("finish_reason")),
            policy_version=self.version,
            prompt_ids=ids,
        )

    async def logprobs(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], *, temperature: float = 1.0
    ) -> list[float]:
        raise PolicyError("the openai backend cannot score given tokens; use inprocess or sglang for OPD teachers")

    def publish(self, weights: Any, version: int) -> None:
        raise PolicyError("the openai backend is for evaluation and judging only; it cannot take weight updates")

    async def aclose(self) -> None:
        await self.servers.aclose()


def _common(s: SamplingParams) -> dict[str, Any]:
    out: dict[str, Any] = {"max_tokens": s.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p}
    if s.seed is not None:
        out["seed"] = s.seed
    if s.stop:
        out["stop"] = list(s.stop)
    return out


def _finish(reason: Any) -> str:
    return "length" if reason == "length" else "stop"


def _with_tool_calls(content: str, calls: Sequence[Any]) -> str:
    """Tool calls the server parsed out, put back as ``<tool_call>`` blocks so envs see the raw action."""
    blocks = []
    for call in calls:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        args = fn.get("arguments", "{}")
        with contextlib.suppress(ValueError):  # bad JSON stays as the server's text; the env reports it
            args = json.loads(args) if isinstance(args, str) else args
        blocks.append(f"<tool_call>\n{json.dumps({'name': fn.get('name'), 'arguments': args})}\n</tool_call>")
    return "\n".join([content, *blocks]) if blocks and content else content or "\n".join(blocks)
