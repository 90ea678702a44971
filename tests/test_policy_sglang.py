"""Protocol test of the sglang backend.

A real SGLang server needs CUDA, so these tests start local HTTP servers on 127.0.0.1 that speak
SGLang's native API as documented in its ``http_server.py`` / ``io_struct.py`` (``/generate`` with
``input_ids``, ``sampling_params``, ``return_logprob``, ``logprob_start_len``; ``meta_info`` with
``finish_reason``, ``weight_version``, ``output_token_logprobs`` and ``input_token_logprobs`` as
``[logprob, token_id, text]``; ``/update_weights_from_disk``; ``/init_weights_update_group``;
``/update_weights_from_distributed``; ``/get_model_info``; ``/flush_cache``; ``/health``). Behind
them runs the real tiny model (the inprocess backend), so tokens and log-probs are real. What this
cannot check is SGLang itself; it checks that our client speaks its protocol and survives bad servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from claw_train.models import tiny
from claw_train.policy import PolicyError, SamplingParams
from claw_train.policy.inprocess import InProcessPolicy
from claw_train.policy.sglang import SGLangPolicy

CHAT = [{"role": "user", "content": "Repeat exactly, with nothing else: hello world"}]
REQUIRED_GROUP_FIELDS = {"master_address": str, "master_port": int, "rank_offset": int, "world_size": int}


class StandIn:
    """One SGLang-protocol server backed by the tiny model; ``mode`` switches on misbehaviour."""

    def __init__(self, model: Path):
        self.policy = InProcessPolicy(model)
        self.version = "0"
        self.mode = "ok"
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.wire: dict[str, torch.Tensor] = {}  # what the "NCCL broadcast" delivered
        self.app = self._routes()

    def _routes(self) -> FastAPI:
        app = FastAPI()

        @app.get("/health")
        async def health() -> Response:
            return Response(status_code=200)

        @app.get("/get_model_info")
        async def model_info() -> dict[str, Any]:
            path = self.policy.model_path
            return {"model_path": path, "tokenizer_path": path, "is_generation": True, "weight_version": self.version}

        @app.api_route("/flush_cache", methods=["GET", "POST"])
        async def flush_cache() -> PlainTextResponse:
            self.calls.append(("/flush_cache", {}))
            return PlainTextResponse("Cache flushed.\n")

        @app.post("/generate")
        async def generate(request: Request) -> Response:
            body = await request.json()
            self.calls.append(("/generate", body))
            if self.mode == "malformed":
                return Response('{"text": "half', media_type="application/json")
            if self.mode == "no_meta":
                return JSONResponse({"text": "hi", "output_ids": [1]})
            if self.mode == "error":
                return JSONResponse({"error": {"message": "boom"}}, status_code=500)
            ids = body["input_ids"]
            params = body.get("sampling_params") or {}
            if params.get("max_new_tokens") == 0:
                return JSONResponse(await self._prefill(ids, int(body.get("logprob_start_len", -1))))
            sampling = SamplingParams(
                max_new_tokens=params.get("max_new_tokens", 128),
                temperature=params.get("temperature", 1.0),
                top_p=params.get("top_p", 1.0),
                top_k=max(0, params.get("top_k", -1)),
                seed=params.get("sampling_seed"),
                stop=tuple(params.get("stop") or ()),
            )
            comp = await self.policy.generate(ids, sampling)
            finish = (
                {"type": "stop", "matched": comp.token_ids[-1]}
                if comp.finish_reason == "stop"
                else {"type": "length", "length": len(comp.token_ids)}
            )
            meta = {
                "id": "req-1",
                "finish_reason": finish,
                "prompt_tokens": len(ids),
                "completion_tokens": len(comp.token_ids),
                "weight_version": str(comp.policy_version),
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(comp.logprobs, comp.token_ids, strict=True)],
            }
            return JSONResponse({"text": comp.text, "output_ids": comp.token_ids, "meta_info": meta})

        @app.post("/update_weights_from_disk")
        async def update_from_disk(request: Request) -> JSONResponse:
            body = await request.json()
            self.calls.append(("/update_weights_from_disk", body))
            return self._publish(body["model_path"], body.get("weight_version"))

        @app.post("/init_weights_update_group")
        async def init_group(request: Request) -> JSONResponse:
            body = await request.json()
            self.calls.append(("/init_weights_update_group", body))
            for name, kind in REQUIRED_GROUP_FIELDS.items():
                if not isinstance(body.get(name), kind):
                    return JSONResponse({"success": False, "message": f"bad {name}"}, status_code=400)
            return JSONResponse({"success": True, "message": "group ready"})

        @app.post("/update_weights_from_distributed")
        async def update_distributed(request: Request) -> JSONResponse:
            body = await request.json()
            self.calls.append(("/update_weights_from_distributed", body))
            for _ in range(200):  # the broadcast runs alongside this request, as over NCCL
                if set(self.wire) >= set(body["names"]):
                    break
                await asyncio.sleep(0.01)
            got = {n: self.wire[n] for n in body["names"] if n in self.wire}
            for n, dtype, shape in zip(body["names"], body["dtypes"], body["shapes"], strict=True):
                t = got.get(n)
                if t is None or str(t.dtype).removeprefix("torch.") != dtype or list(t.shape) != shape:
                    return JSONResponse({"success": False, "message": f"tensor {n} not as announced"}, status_code=400)
            return self._publish(got, body.get("weight_version"))

        return app

    async def _prefill(self, ids: list[int], start: int) -> dict[str, Any]:
        lps = await self.policy.logprobs(ids[:1], ids[1:])
        entries = [[None, ids[0], None]] + [[lp, t, None] for lp, t in zip(lps, ids[1:], strict=True)]
        meta = {
            "id": "req-2",
            "finish_reason": {"type": "length", "length": 0},
            "prompt_tokens": len(ids),
            "completion_tokens": 0,
            "weight_version": self.version,
            "input_token_logprobs": entries[max(0, start) :],
            "output_token_logprobs": [],
        }
        return {"text": "", "output_ids": [], "meta_info": meta}

    def _publish(self, weights: Any, version: str | None) -> JSONResponse:
        try:
            self.policy.publish(weights, int(version or 0))
        except PolicyError as err:
            return JSONResponse({"success": False, "message": str(err), "num_paused_requests": 0}, status_code=400)
        self.version = version or self.version
        return JSONResponse(
            {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return tiny.build_tiny()


@contextlib.contextmanager
def serving(standin: StandIn) -> Iterator[str]:
    """``standin`` served by uvicorn on a free loopback port (in a thread) for the block; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(standin.app, host="127.0.0.1", port=_free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    standin.url = f"http://127.0.0.1:{server.config.port}"
    try:
        yield standin.url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def servers(tiny_path) -> Iterator[list[StandIn]]:
    standins = [StandIn(tiny_path) for _ in range(2)]
    with contextlib.ExitStack() as running:
        for s in standins:
            running.enter_context(serving(s))
        yield standins
    for s in standins:
        s.policy.close()


@pytest.fixture
async def client(servers, tiny_path) -> AsyncIterator[SGLangPolicy]:
    pol = SGLangPolicy([s.url for s in servers], tiny_path, retries=2, backoff=0.01)
    yield pol
    await pol.aclose()


async def test_generate_round_robins_with_exact_tokens_and_logprobs(servers, client):
    sampling = SamplingParams(max_new_tokens=10, temperature=0.8, top_k=40, seed=4, stop=("zz",))
    comps = [await client.generate(CHAT, sampling) for _ in range(4)]
    hits = [sum(1 for path, _ in s.calls if path == "/generate") for s in servers]
    assert hits == [2, 2]
    body = servers[0].calls[0][1]
    assert body["return_logprob"] is True and isinstance(body["input_ids"], list)
    assert body["sampling_params"] == {
        "max_new_tokens": 10,
        "temperature": 0.8,
        "top_p": 1.0,
        "top_k": 40,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "stop": ["zz"],
        "sampling_seed": 4,
    }
    text = client.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert body["input_ids"] == client.tokenizer.encode(text, add_special_tokens=False)
    for c in comps:
        assert len(c.token_ids) == len(c.logprobs) > 0 and c.policy_version == 0
        assert c.finish_reason in ("stop", "length") and c.prompt_ids == body["input_ids"]
        prefill = await client.logprobs(c.prompt_ids, c.token_ids, temperature=1.0)
        assert len(prefill) == len(c.token_ids)
    exact = await client.generate(CHAT, SamplingParams(max_new_tokens=8, temperature=1.0, seed=9))
    prefill = await client.logprobs(exact.prompt_ids, exact.token_ids)
    assert max(abs(a - b) for a, b in zip(prefill, exact.logprobs, strict=True)) < 1e-4
    with pytest.raises(PolicyError, match="temperature 1"):
        await client.logprobs(exact.prompt_ids, exact.token_ids, temperature=0.5)


async def test_server_state_endpoints(servers, client):
    assert await client.health() == {s.url: True for s in servers}
    info = await client.model_info()
    assert info["is_generation"] is True and info["weight_version"] == "0"
    await client.flush_cache()
    assert all(("/flush_cache", {}) in s.calls for s in servers)


async def test_weight_updates_from_disk_are_versioned_and_failures_are_clear(servers, client, tmp_path):
    from safetensors.torch import save_file

    state = {k: v + 0.02 for k, v in servers[0].policy._active.state_dict().items() if k != "lm_head.weight"}
    good = tmp_path / "v3"
    good.mkdir()
    save_file(state, str(good / "model.safetensors"))
    await asyncio.to_thread(client.publish, str(good), 3)
    for s in servers:
        body = [b for p, b in s.calls if p == "/update_weights_from_disk"][-1]
        assert body == {"model_path": str(good), "weight_version": "3", "abort_all_requests": False}
    assert {(await client.generate(CHAT, SamplingParams(max_new_tokens=3))).policy_version for _ in range(2)} == {3}

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(PolicyError, match=r"failed on 2 of 2 servers.*truncated or corrupt"):
        await asyncio.to_thread(client.publish, str(bad), 4)
    assert client.version == 3
    assert (await client.generate(CHAT, SamplingParams(max_new_tokens=3))).policy_version == 3  # old weights serve

    with pytest.raises(PolicyError, match="publish_dir"):
        client.publish(state, 5)
    client.publish_dir = tmp_path / "published"
    await asyncio.to_thread(client.publish, state, 5)
    assert (tmp_path / "published" / "v5" / "model.safetensors").exists()
    assert (await client.generate(CHAT, SamplingParams(max_new_tokens=3))).policy_version == 5
    with pytest.raises(PolicyError, match="older than"):
        client.publish(str(good), 4)


async def test_distributed_weight_update_protocol(servers, client):
    joined = []

    def broadcaster(weights):  # stands in for the trainer's NCCL broadcast
        for s in servers:
            s.wire.update({k: v.clone() for k, v in weights.items()})

    client.broadcaster = broadcaster
    with pytest.raises(PolicyError, match="init_weights_update_group"):
        client.publish({"x": torch.zeros(1)}, 1)
    world = await asyncio.to_thread(
        client.init_weights_update_group, "10.0.0.1", 29500, ranks_per_server=[2, 1], join=joined.append
    )
    assert world == 4 and joined == [4]
    bodies = [next(b for p, b in s.calls if p == "/init_weights_update_group") for s in servers]
    assert [b["rank_offset"] for b in bodies] == [1, 3]
    assert all(b["world_size"] == 4 and b["group_name"] == "weight_update_group" for b in bodies)
    assert all(b["backend"] == "nccl" and b["master_port"] == 29500 for b in bodies)

    state = {k: v * 1.01 for k, v in servers[0].policy._active.state_dict().items()}
    await asyncio.to_thread(client.publish, state, 7)
    body = next(b for p, b in servers[1].calls if p == "/update_weights_from_distributed")
    assert body["names"] == list(state) and body["weight_version"] == "7"
    assert body["dtypes"][0] == "float32" and body["shapes"][0] == list(next(iter(state.values())).shape)
    assert (await client.generate(CHAT, SamplingParams(max_new_tokens=2))).policy_version == 7


async def test_down_servers_and_bad_replies_give_clear_errors(servers, tiny_path):
    dead = f"http://127.0.0.1:{_free_port()}"
    mixed = SGLangPolicy([dead, servers[0].url], tiny_path, retries=1, backoff=0.01)
    try:
        for _ in range(3):  # every request lands, whichever server its turn starts on
            assert (await mixed.generate(CHAT, SamplingParams(max_new_tokens=2))).token_ids
        assert await mixed.health() == {dead: False, servers[0].url: True}
    finally:
        await mixed.aclose()

    down = SGLangPolicy([dead], tiny_path, retries=1, backoff=0.01)
    try:
        with pytest.raises(PolicyError, match=r"no server answered.*ConnectError"):
            await down.generate(CHAT, SamplingParams(max_new_tokens=2))
        with pytest.raises(PolicyError, match="unreachable"):
            down.publish("/tmp/x", 1)
    finally:
        await down.aclose()

    one = SGLangPolicy([servers[1].url], tiny_path, retries=1, backoff=0.01)
    try:
        for mode, message in [("malformed", "malformed JSON"), ("no_meta", "no 'meta_info'"), ("error", "HTTP 500")]:
            servers[1].mode = mode
            with pytest.raises(PolicyError, match=message):
                await one.generate(CHAT, SamplingParams(max_new_tokens=2))
    finally:
        await one.aclose()

    with pytest.raises(PolicyError, match="http://"):
        SGLangPolicy(["localhost:30000"], tiny_path)
    with pytest.raises(PolicyError, match="no server URLs"):
        SGLangPolicy([], tiny_path)
