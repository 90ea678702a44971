"""claw-serve end to end: a real uvicorn server on 127.0.0.1 in front of the tiny model, driven by the real
``openai`` client (and raw HTTP for bad input). What is checked is the plumbing — the OpenAI schema, sessions and
next states, judging, a trainer step and the served version, side turns, bad input, Ctrl-C — not learning.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
import httpx  # noqa: E402

from claw_train.options.resolve import build  # noqa: E402
from claw_train.options.tree import ServeArgs  # noqa: E402
from claw_train.policy.base import Completion, Policy, PolicyError  # noqa: E402
from claw_train.runlog.logs import read_logs  # noqa: E402
from claw_train.serve import serve  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLAW_SERVE = str(Path(sys.executable).parent / "claw-serve")


@pytest.fixture(scope="module")
def model_path() -> str:
    from claw_train.models.tiny import bootstrap

    return str(bootstrap("conversation", steps=2, progress=False))


class SwitchableJudge:
    """The rules judge, or (``down``) a judge whose every call fails like an unreachable server."""

    def __init__(self) -> None:
        from judges import make_judge

        self.inner = make_judge("rules", family="conversation", votes=1)
        self.down = False

    async def judge(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("judge server unreachable")
        return await self.inner.judge(*args, **kwargs)

    def metrics_dict(self) -> dict[str, Any]:
        return self.inner.metrics_dict()

    async def reachable(self) -> str | None:
        return await self.inner.reachable()

    async def aclose(self) -> None:
        await self.inner.aclose()


class Server:
    """``serve()`` in a thread with its own event loop; requests carry the server's API key when it has one."""

    def __init__(self, cfg: ServeArgs, **kwargs: Any):
        self.cfg = cfg
        self.key = cfg.serving.api_key or None
        self.started = threading.Event()
        self.result: Any = None
        self.url = ""
        self.thread = threading.Thread(target=self._main, args=(kwargs,), daemon=True)
        self.thread.start()
        assert self.started.wait(120), "the server did not start"
        assert self.url, f"the server stopped at start: {self.result}"
        self.root = self.url[:-3]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def _main(self, kwargs: dict[str, Any]) -> None:
        def ready(url: str, pipeline: Any) -> None:
            self.url, self.pipeline, self.loop = url, pipeline, asyncio.get_running_loop()
            self.started.set()

        try:
            self.result = asyncio.run(serve(self.cfg, on_ready=ready, **kwargs))
        finally:
            self.started.set()

    def _auth(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def client(self, session: str | None = None, *, key: str | None = "", **kwargs: Any) -> Any:
        """An ``openai`` client (``key=""``: the server's own key; None: no key)."""
        headers = {"X-Session-Id": session} if session else {}
        key = self.key if key == "" else key
        kwargs.setdefault("timeout", 60)
        return openai.OpenAI(base_url=self.url, api_key=key or "x", default_headers=headers, max_retries=0, **kwargs)

    def post(self, body: Any, headers: dict[str, Any] | None = None, *, key: str | None = "", **kwargs: Any):
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", **self._auth(self.key if key == "" else key), **(headers or {})}
        kwargs.setdefault("timeout", 60)
        return httpx.post(f"{self.url}/chat/completions", content=content, headers=hdrs, **kwargs)

    def metrics(self) -> dict[str, Any]:
        return httpx.get(f"{self.root}/metrics", headers=self._auth(self.key), timeout=10).json()

    def logs(self) -> list[dict[str, Any]]:
        self.pipeline.log.flush()
        return read_logs(self.cfg.run.output_dir / "logs")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.pipeline.request_stop, "interrupted", "test over")
        self.thread.join(120)


def wait_for(check: Any, timeout: float = 90.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    judge = SwitchableJudge()
    cfg = build(
        ServeArgs,
        command="serve",
        env="conversation",
        model="tiny",
        port=0,
        output_dir=tmp_path_factory.mktemp("serve") / "run",
        samples_per_step=2,
        max_new_tokens=16,
        report_to="none",
        judge_workers=2,
        request_timeout=60,
    )
    srv = Server(cfg, model_path=model_path, judge=judge)
    srv.judge = judge
    yield srv
    srv.stop()
    assert srv.result.status == "interrupted"


def turns_of(srv: Server, session: str) -> list[dict[str, Any]]:
    return sorted((r for r in srv.logs() if r["kind"] == "turn" and r["group"] == session), key=lambda r: r["step"])


def converse(client: Any, replies: list[str], first: str = "What is 7 * 6?", **create: Any) -> list[Any]:
    """A main-line conversation: the user's first message, then each of ``replies`` after the assistant's turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    out = []
    for reply in [None, *replies]:
        if reply is not None:
            messages += [{"role": "assistant", "content": out[-1].choices[0].message.content}]
            messages += [{"role": "user", "content": reply}]
        out.append(client.chat.completions.create(model="tiny", messages=messages, **create))
    return out


def test_reply_schema_models_health_and_stream(server):
    client = server.client(f"schema-{uuid.uuid4().hex[:6]}")
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "Hi there"}], max_tokens=8
    )
    r = raw.parse()
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "tiny"
    assert r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    assert r.system_fingerprint == f"claw-v{raw.headers['x-policy-version']}"
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(f"{server.url[:-3]}/healthz").json()["status"] == "ok"
    chunks = list(
        server.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi"}], stream=True, max_tokens=4
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_session_turns_are_judged_trained_and_served_newer(server):
    session = f"learn-{uuid.uuid4().hex[:6]}"
    replies = ["thanks, that is perfect!", "Don't use bold. Write it shorter."]
    out = converse(server.client(session), replies)
    assert all(r.system_fingerprint == "claw-v0" for r in out)
    judged = wait_for(lambda: len(t := turns_of(server, session)) >= 2 and t, what="two judged turns")
    assert [t["next_state"]["text"] for t in judged] == replies
    assert [t["action"] for t in judged] == [r.choices[0].message.content for r in out[:2]]
    assert [t["next_state"]["evaluative"] for t in judged] == [1.0, -1.0]
    assert all(t["decision"] == "accepted" and "votes" in t["judgement"] for t in judged)
    wait_for(lambda: server.metrics()["updates"] >= 1, what="a trainer step")
    wait_for(lambda: server.metrics()["version"] >= 1, what="the new weights")
    later = server.client(session).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}])
    assert int(later.system_fingerprint.removeprefix("claw-v")) >= 1
    ours = {t["sample_id"] for t in judged}
    wait_for(lambda: trained(server, ours) or filler_turn(server), what="both turns in an update's ledger")


def trained(srv: Server, sample_ids: set[str]) -> bool:
    """Whether every one of ``sample_ids`` is in the ledger of some update."""
    path = srv.cfg.run.output_dir / "ledger.jsonl"
    ledger = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return sample_ids <= {s for e in ledger for s in e.get("samples", [])}


def filler_turn(srv: Server) -> bool:
    """One judged turn from a new session, then a second's pause; False. The server is shared by this module, so
    another test's turn may have taken a place in an earlier step, leaving one of ours waiting for a partner."""
    converse(srv.client(f"filler-{uuid.uuid4().hex[:6]}"), ["thanks!"])
    time.sleep(1.0)
    return False


def test_side_turns_are_served_but_never_trained(server):
    session = f"side-{uuid.uuid4().hex[:6]}"
    client = server.client(session)
    messages = [{"role": "user", "content": "What is 12 + 30?"}]
    first = client.chat.completions.create(model="tiny", messages=messages)
    side = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Give this chat a title."}],
        extra_headers={"X-Turn-Type": "side"},
    )
    messages += [{"role": "assistant", "content": first.choices[0].message.content}]
    messages += [{"role": "user", "content": "thanks!"}]
    client.chat.completions.create(model="tiny", messages=messages)
    (turn,) = wait_for(lambda: turns_of(server, session), what="the main turn's record")
    assert turn["action"] == first.choices[0].message.content and turn["next_state"]["text"] == "thanks!"
    logs = server.logs()
    sides = [r for r in logs if r["kind"] == "side" and r["session"] == session]
    assert [s["action"] for s in sides] == [side.choices[0].message.content]
    assert not any(r["kind"] == "turn" and r["action"] == side.choices[0].message.content for r in logs)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        ({"model": "tiny"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -3}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}, "temperature"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 3}, "n"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
    ],
)
def test_bad_input_is_an_openai_400(server, body, param):
    r = server.post(body, headers={"X-Session-Id": "bad-input"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["param"] == param


def test_bad_headers_huge_max_tokens_and_unknown_model(server):
    msgs = [{"role": "user", "content": "hi"}]
    r = server.post({"messages": msgs}, headers={"X-Turn-Type": "sideways"})
    assert r.status_code == 400 and "X-Turn-Type" in r.json()["error"]["message"]
    r = server.post({"model": "tiny", "messages": msgs, "max_tokens": 10**9})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= server.cfg.rollout.max_new_tokens
    raw = server.client().chat.completions.with_raw_response.create(model="gpt-9", messages=msgs, max_tokens=4)
    assert "not served here" in raw.headers["x-claw-warning"] and raw.parse().model == "tiny"
    assert httpx.get(f"{server.url[:-3]}/healthz").status_code == 200  # still serving after all of that


def test_a_trained_turn_says_it_does_not_sample_at_the_clients_temperature(server):
    msgs = [{"role": "user", "content": "what is 2 + 2?"}]
    own = server.cfg.rollout.temperature
    create = server.client("sampling-session").chat.completions.with_raw_response.create
    main = create(model="tiny", messages=msgs, max_tokens=4, temperature=0.2, top_p=0.5)
    said = main.headers["x-claw-sampling"]
    assert "temperature 0.2 and top_p 0.5 not used" in said and f"temperature {own:g}" in said
    side = create(model="tiny", messages=msgs, max_tokens=4, temperature=0.2, extra_headers={"X-Turn-Type": "side"})
    one_off = server.client().chat.completions.with_raw_response.create(
        model="tiny", messages=msgs, max_tokens=4, temperature=0.2
    )  # no session: never trained, sampled as asked
    same = server.client("other-session").chat.completions.with_raw_response.create(
        model="tiny", messages=msgs, max_tokens=4, temperature=own
    )
    assert all("x-claw-sampling" not in r.headers for r in (side, one_off, same))


def test_client_disconnect_and_concurrent_main_turns(server):
    session = f"race-{uuid.uuid4().hex[:6]}"
    msgs = [{"role": "user", "content": "What is 3 * 3?"}]
    with pytest.raises(httpx.TimeoutException):  # the client gives up while the policy generates
        server.post({"messages": msgs}, headers={"X-Session-Id": session}, timeout=httpx.Timeout(10, read=0.001))
    results: list[int] = []

    def send(text: str) -> None:
        r = server.post({"messages": [{"role": "user", "content": text}]}, headers={"X-Session-Id": session})
        results.append(r.status_code)

    threads = [threading.Thread(target=send, args=(f"question {i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [200, 200]  # one session's main turns are served one after the other
    # each new history closed the turn before it without a next state: logged, never trained
    closed = wait_for(lambda: len(t := turns_of(server, session)) >= 2 and t, what="closed turns")
    assert all(t["reason"] == "no_next_state" and t["next_state"] is None for t in closed)


def test_judge_down_serving_goes_on(server):
    server.judge.down = True
    try:
        session = f"judge-down-{uuid.uuid4().hex[:6]}"
        out = converse(server.client(session), ["thanks!"])
        assert len(out) == 2
        (turn,) = wait_for(lambda: turns_of(server, session), what="the judged turn")
        assert turn["reason"] == "judge_error" and "unreachable" in turn["judge_error"]
        metrics = server.metrics()
        assert metrics["counts"]["judge_errors"] >= 1 and metrics["masked"]["judge_error"] >= 1
    finally:
        server.judge.down = False


TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


class StubPolicy(Policy):
    """A policy with the tiny tokenizer that answers, calls a tool, fails, or never answers (``mode``)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.mode = "ok"

    async def generate(self, prompt: Any, sampling: Any, *, tools: Any = None) -> Completion:
        if self.mode == "fail":
            raise PolicyError("worker crashed")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        text = TOOL_CALL if self.mode == "tool" else "Hello there."
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return Completion(text, ids, [-0.5] * len(ids), "stop", 0, list(prompt))


def test_stub_policy_503s_tool_calls_idle_sessions_and_no_train(model_path, tmp_path):
    from transformers import AutoTokenizer

    policy = StubPolicy(AutoTokenizer.from_pretrained(model_path))
    cfg = build(
        ServeArgs,
        command="serve",
        env="conversation",
        model="tiny",
        port=0,
        output_dir=tmp_path / "run",
        train=False,
        request_timeout=1.0,
        session_timeout=2.0,
    )
    srv = Server(cfg, model_path=model_path, policy=policy)
    try:
        out = converse(srv.client("s"), ["Don't use bold."])
        assert [r.choices[0].message.content for r in out] == ["Hello there."] * 2
        (turn,) = wait_for(lambda: turns_of(srv, "s")[:1], what="the logged turn")
        assert turn["reason"] == "not_training" and turn["next_state"]["text"] == "Don't use bold."
        for mode, text in (("fail", "worker crashed"), ("hang", "did not answer within 1 s")):
            policy.mode = mode
            started = time.monotonic()
            r = srv.post({"messages": [{"role": "user", "content": "hi"}]}, headers={"X-Session-Id": "s"})
            assert r.status_code == 503 and text in r.json()["error"]["message"]
            assert time.monotonic() - started < 10
        policy.mode = "tool"
        client = srv.client("tools")
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        call = client.chat.completions.create(model="tiny", messages=messages, tools=[WEATHER]).choices[0]
        assert call.finish_reason == "tool_calls" and call.message.tool_calls[0].function.name == "get_weather"
        assert json.loads(call.message.tool_calls[0].function.arguments) == {"city": "Paris"}
        messages += [call.message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.message.tool_calls[0].id, "content": "sunny"}]
        policy.mode = "ok"
        assert client.chat.completions.create(model="tiny", messages=messages, tools=[WEATHER]).choices[0]
        (turn,) = wait_for(lambda: turns_of(srv, "tools")[:1], what="the tool call's turn")
        assert turn["next_state"]["role"] == "tool" and turn["next_state"]["text"] == "sunny"
        # a session left alone for session_timeout closes its last turn without a next state
        closed = wait_for(lambda: turns_of(srv, "tools")[1:], what="the idle session's last turn closed")
        assert closed[-1]["next_state"] is None and srv.metrics()["counts"]["sessions_timed_out"] >= 1
        assert srv.post({"messages": [{"role": "user", "content": "hi"}]}).status_code == 200
        assert srv.metrics()["counts"]["policy_errors"] == 1
    finally:
        srv.stop()
    assert srv.result.status == "interrupted" and srv.result.updates == 0


def test_sessions_past_max_sessions_close_the_longest_silent_and_busy_ones_are_a_429(model_path, tmp_path):
    from transformers import AutoTokenizer

    policy = StubPolicy(AutoTokenizer.from_pretrained(model_path))
    cfg = build(
        ServeArgs, command="serve", env="conversation", model="tiny", port=0, output_dir=tmp_path / "run",
        train=False, request_timeout=2.0, max_sessions=2,
    )  # fmt: skip
    srv = Server(cfg, model_path=model_path, policy=policy)
    try:
        for session in ("a", "b", "c"):  # "c" arrives with two open: "a", the longest silent, is closed
            converse(srv.client(session), [])
        assert srv.metrics()["sessions"] == 2 and srv.metrics()["counts"]["sessions_evicted"] == 1
        (closed,) = wait_for(lambda: turns_of(srv, "a"), what="a's last turn closed")
        assert closed["next_state"] is None and not turns_of(srv, "b")  # b and c are still open
        policy.mode = "hang"  # both open sessions mid-request: a new one cannot make room
        busy = [threading.Thread(target=srv.post, args=({"messages": [{"role": "user", "content": "hi"}]},),
                                 kwargs={"headers": {"X-Session-Id": sid}}) for sid in ("b", "c")]  # fmt: skip
        for thread in busy:
            thread.start()
        wait_for(lambda: srv.metrics()["counts"].get("requests", 0) >= 5, what="b and c mid-request")
        r = srv.post({"messages": [{"role": "user", "content": "hi"}]}, headers={"X-Session-Id": "d"})
        assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
        assert "mid-request (max_sessions 2)" in r.json()["error"]["message"]
        for thread in busy:
            thread.join(30)
        policy.mode = "ok"
        assert srv.post({"messages": [{"role": "user", "content": "hi"}]}, headers={"X-Session-Id": "d"}).is_success
    finally:
        srv.stop()


def test_help_explains_headers():
    out = subprocess.run([CLAW_SERVE, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for text in ("X-Session-Id", "X-Turn-Type", "curl", "from openai import OpenAI", "--no-train", "--judge"):
        assert text in out.stdout


def launch_cli(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Start ``claw-serve`` and read its output until it says where it serves; returns it and that output."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "claw-serve: serving" in line:
            break
    return proc, "".join(lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_serves_learns_and_checkpoints_on_ctrl_c(model_path, tmp_path):
    port, out = free_port(), tmp_path / "run"
    argv = [CLAW_SERVE, "--model", model_path, "--port", str(port), "--output-dir", str(out)]
    argv += ["--samples-per-step", "2", "--max-new-tokens", "8", "--checkpoint-every", "100"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc, started = launch_cli(argv, env)
    try:
        assert f"http://127.0.0.1:{port}/v1" in started, started
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="x", default_headers={"X-Session-Id": "a"}
        )
        converse(client, ["perfect, thanks!", "Too long. Keep it short."])
        deadline = time.monotonic() + 60
        while httpx.get(f"http://127.0.0.1:{port}/metrics").json()["updates"] < 1:
            assert time.monotonic() < deadline, "no trainer step"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "checkpoint-1" in rest
    assert (out / "checkpoints" / "checkpoint-1" / "trainer_state.json").is_file()
    records = read_logs(out / "logs")
    assert sum(r["kind"] == "turn" and r["decision"] == "accepted" for r in records) == 2
