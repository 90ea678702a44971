"""The openai backend (evaluation only) against a local OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from claw_train.policy import PolicyError, SamplingParams
from claw_train.policy.loader import load_policy
from claw_train.policy.openai import OpenAIPolicy


class ChatServer:
    """Answers like vLLM/SGLang's OpenAI server; ``mode`` switches on refusals and junk."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.bodies: list[dict[str, Any]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.bodies.append(body)
            if self.mode == "no_logprobs" and body.get("logprobs"):
                return JSONResponse({"error": {"message": "logprobs are not supported"}}, status_code=400)
            if self.mode == "junk":
                return Response("<html>proxy error</html>{", media_type="application/json")
            message: dict[str, Any] = {"role": "assistant", "content": "The answer is 4."}
            if body.get("tools"):
                call = {"name": "python", "arguments": json.dumps({"code": "print(2+2)"})}
                message = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c1", "type": "function", "function": call}],
                }
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "length"}
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [{"token": t, "logprob": -0.5, "bytes": []} for t in ("The", " answer")]
                }
            return JSONResponse({"id": "x", "object": "chat.completion", "choices": [choice]})

        @app.post("/v1/completions")
        async def complete(request: Request) -> JSONResponse:
            body = await request.json()
            self.bodies.append(body)
            choice = {"index": 0, "text": " four", "finish_reason": "stop", "logprobs": {"token_logprobs": [-0.25]}}
            return JSONResponse({"id": "y", "object": "text_completion", "choices": [choice]})

        self.app = app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server() -> Iterator[tuple[ChatServer, int]]:
    chat = ChatServer()
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(chat.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    yield chat, port
    srv.should_exit = True
    thread.join(timeout=10)


async def test_chat_completions_with_logprobs_tools_and_token_prompts(server):
    chat, port = server
    policy = load_policy("my-model", f"openai://127.0.0.1:{port}")
    assert isinstance(policy, OpenAIPolicy) and policy.base_url == f"http://127.0.0.1:{port}/v1"
    try:
        comp = await policy.generate([{"role": "user", "content": "2+2?"}], SamplingParams(max_new_tokens=5, seed=3))
        assert (comp.text, comp.logprobs, comp.finish_reason, comp.token_ids) == (
            "The answer is 4.",
            [-0.5, -0.5],
            "length",
            [],
        )
        assert chat.bodies[-1] | {"messages": None} == {
            "model": "my-model",
            "messages": None,
            "max_tokens": 5,
            "temperature": 1.0,
            "top_p": 1.0,
            "seed": 3,
            "logprobs": True,
        }
        tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
        called = await policy.generate([{"role": "user", "content": "run it"}], SamplingParams(), tools=tools)
        assert called.text == '<tool_call>\n{"name": "python", "arguments": {"code": "print(2+2)"}}\n</tool_call>'
        assert chat.bodies[-1]["tools"] == tools
        by_ids = await policy.generate([1, 2, 3], SamplingParams(max_new_tokens=2))
        assert (by_ids.text, by_ids.logprobs, by_ids.prompt_ids) == (" four", [-0.25], [1, 2, 3])
        assert chat.bodies[-1]["prompt"] == [1, 2, 3]

        chat.mode = "no_logprobs"  # a server that refuses logprobs is asked without them from then on
        plain = await policy.generate([{"role": "user", "content": "2+2?"}], SamplingParams())
        assert plain.text == "The answer is 4." and plain.logprobs == [] and "logprobs" not in chat.bodies[-1]
    finally:
        await policy.aclose()


async def test_openai_backend_refuses_training_and_reports_bad_servers(server):
    chat, port = server
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", retries=1, backoff=0.01)
    try:
        with pytest.raises(PolicyError, match="evaluation and judging only"):
            policy.publish({}, 1)
        with pytest.raises(PolicyError, match="cannot score"):
            await policy.logprobs([1], [2])
        chat.mode = "junk"
        with pytest.raises(PolicyError, match="malformed JSON"):
            await policy.generate([{"role": "user", "content": "hi"}], SamplingParams())
        with pytest.raises(PolicyError, match="chat messages"):
            await policy.generate([{"content": "no role"}], SamplingParams())
    finally:
        await policy.aclose()
    down = OpenAIPolicy(f"http://127.0.0.1:{_free_port()}/v1", "m", retries=1, backoff=0.01)
    try:
        with pytest.raises(PolicyError, match="no server answered"):
            await down.generate([{"role": "user", "content": "hi"}], SamplingParams())
    finally:
        await down.aclose()
    with pytest.raises(PolicyError, match="no server"):
        load_policy("m", "openai://")
