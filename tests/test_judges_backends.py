"""Judge backends against a real OpenAI-style HTTP server on 127.0.0.1 started here, with scripted
replies, latency, 500s, timeouts, malformed bodies, and an endpoint that is down; plus the policy backend."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_judges_prompts import HAND_BUILT  # next states as each family sends them

from claw_envs import Evaluative, JudgeTemplates, NextState
from judges import PRMJudge, make_backend, make_judge
from judges.backends import BackendError, CircuitBreaker, OpenAIBackend, PolicyBackend, base
from judges.backends.openai import normalize_base_url

STEP = NextState(
    "Wrong: you sent 'hi'.",
    evaluative=Evaluative(-1.0, ("mismatch",)),
    directive="Reply with exactly 'hello world'.",
    judge_inputs={"task": "Repeat exactly: hello world", "action": "hi", "result": "Wrong: you sent 'hi'."},
)


@dataclass
class Reply:
    """What the server does with one request: wait ``delay`` s, then send ``raw`` bytes or a chat body."""

    content: str | None = "\\boxed{1}"
    status: int = 200
    raw: bytes | None = None
    delay: float = 0.0


def chat_body(content: str | None) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


class ScriptedOpenAIServer:
    """``POST /v1/chat/completions`` answered by ``script(body, n)`` (n counts requests from 0)."""

    def __init__(self) -> None:
        self.script: Callable[[dict, int], Reply] = lambda body, n: Reply()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": {"message": "no such route"}}')
                    return
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server.script(body, n)
                    time.sleep(reply.delay)
                    payload = reply.raw if reply.raw is not None else chat_body(reply.content)
                    if reply.status != 200 and reply.raw is None:
                        payload = b'{"error": {"message": "scripted failure"}}'
                    self._send(reply.status, payload)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ScriptedOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with ScriptedOpenAIServer() as srv:
        yield srv


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_at_once(parties: int, script: Callable[[dict, int], Reply]) -> Callable[[dict, int], Reply]:
    """``script`` whose replies wait until ``parties`` requests are in the server together (at most 10 s): a loaded
    machine that sends them slowly cannot make concurrent requests look sequential."""
    barrier = threading.Barrier(parties, timeout=10)

    def together(body: dict, n: int) -> Reply:
        barrier.wait()
        return script(body, n)

    return together


def fast_backend(url: str, **kw) -> OpenAIBackend:
    options = {"timeout": 2.0, "retries": 2, "backoff": 0.01, "failure_threshold": 50, "reset_after": 0.2}
    return OpenAIBackend(url, model="judge-model", api_key="sk-test", **{**options, **kw})


async def test_scripted_votes_reach_the_server_concurrently_and_are_counted(server):
    answers = ["fine \\boxed{1}", "meh \\boxed{-1}", "good \\boxed{1}"]
    server.script = all_at_once(3, lambda body, n: Reply(answers[n % 3], delay=0.2))
    backend = fast_backend(server.url, timeout=30.0)
    judgement = await PRMJudge(backend, "prm_generic", votes=3).score("hi", STEP)
    assert judgement.available and judgement.score == 1.0
    assert sorted(v.score for v in judgement.votes) == [-1, 1, 1]
    assert all(v.latency >= 0.2 for v in judgement.votes)
    assert server.max_in_flight == 3  # the three votes were in the server at the same time
    body = server.requests[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0.6 and body["n"] == 1
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "Repeat exactly: hello world" in body["messages"][1]["content"]
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert backend.metrics["requests"] == 3 and backend.metrics["votes_valid"] == 3
    await backend.aclose()


async def test_http_500s_are_retried_with_backoff_then_succeed(server):
    server.script = lambda body, n: Reply(status=500) if n < 2 else Reply("\\boxed{-1}")
    backend = fast_backend(server.url)
    judgement = await PRMJudge(backend, "prm_generic", votes=1).score("hi", STEP)
    assert judgement.available and judgement.score == -1.0
    counts = backend.metrics.as_dict()
    assert (counts["http_errors"], counts["retries"], counts["requests"]) == (2, 2, 3)
    await backend.aclose()


async def test_persistent_500s_make_the_judge_unavailable_without_raising(server):
    server.script = lambda body, n: Reply(status=503)
    backend = fast_backend(server.url, retries=1)
    judgement = await PRMJudge(backend, "prm_generic", votes=2).score("hi", STEP)
    assert not judgement.available and judgement.score == 0.0
    assert all(v.score is None and "HTTP 503" in v.error for v in judgement.votes)
    counts = backend.metrics.as_dict()
    assert (counts["http_errors"], counts["votes_failed"], counts["unavailable"]) == (4, 2, 1)
    await backend.aclose()


async def test_client_errors_are_not_retried(server):
    server.script = lambda body, n: Reply(status=401)
    backend = fast_backend(server.url)
    judgement = await PRMJudge(backend, "prm_generic", votes=1).score("hi", STEP)
    assert not judgement.available and "HTTP 401" in judgement.votes[0].error
    assert backend.metrics["retries"] == 0 and len(server.requests) == 1
    await backend.aclose()


async def test_slow_server_times_out_per_call_and_the_judge_returns_in_time(server):
    server.script = lambda body, n: Reply("\\boxed{1}", delay=3.0)
    backend = fast_backend(server.url, timeout=0.2, retries=1)
    async with asyncio.timeout(backend.worst_case_seconds + 1.5):  # a hang fails here, not at pytest's limit
        judgement = await PRMJudge(backend, "prm_generic", votes=2).score("hi", STEP)
    assert not judgement.available and judgement.score == 0.0
    assert all(v.error.startswith("timeout") for v in judgement.votes)
    assert backend.metrics["timeouts"] == 4 and backend.metrics["retries"] == 2
    await backend.aclose()


async def test_judge_deadline_cuts_off_votes_still_running(server):
    # the deadline leaves a loaded machine time for the immediate answer (0.5 s did not: it flipped under load)
    server.script = lambda body, n: Reply("\\boxed{1}", delay=0.0 if n == 0 else 60.0)
    backend = fast_backend(server.url, timeout=120.0, retries=0)
    async with asyncio.timeout(30):
        judgement = await PRMJudge(backend, "prm_generic", votes=3, deadline=2.0).score("hi", STEP)
    assert judgement.available and judgement.score == 1.0  # the one answer that arrived in time decides
    assert sum(1 for v in judgement.votes if v.error and "deadline" in v.error) == 2
    await backend.aclose()


@pytest.mark.parametrize(
    "reply",
    [
        Reply(raw=b"{not json"),
        Reply(raw=b'{"object": "error"}'),
        Reply(raw=b'{"choices": []}'),
        Reply(raw=b'{"choices": [{"message": {"content": 42}}]}'),
        Reply(raw=b"\xff\xfe\x00garbage"),
    ],
    ids=["not-json", "no-choices", "empty-choices", "content-not-text", "binary"],
)
async def test_malformed_bodies_are_counted_and_never_raise(server, reply):
    server.script = lambda body, n: reply
    backend = fast_backend(server.url, retries=1)
    judgement = await PRMJudge(backend, "prm_generic", votes=1).score("hi", STEP)
    assert not judgement.available and judgement.score == 0.0
    assert judgement.votes[0].error.startswith("malformed")
    assert backend.metrics["malformed_responses"] == 2
    await backend.aclose()


async def test_null_empty_and_huge_answers_are_invalid_votes_not_failures(server):
    answers = [None, "", "y" * 100_000, "x" * 100_000 + "\\boxed{-1}"]
    server.script = lambda body, n: Reply(answers[n])
    backend = fast_backend(server.url)
    prm = PRMJudge(backend, "prm_generic", votes=1)
    results = [await prm.score("hi", STEP) for _ in answers]
    assert all(j.available for j in results)
    assert [j.votes[0].score for j in results] == [None, None, None, -1]
    assert backend.metrics["votes_invalid"] == 3 and backend.metrics["votes_failed"] == 0
    await backend.aclose()


class Clock:
    """The circuit breaker's clock, moved by hand: no pause of a loaded machine can open or close a circuit early."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(base, "time", clock)
    return clock


async def test_endpoint_down_opens_the_circuit_then_a_trial_call_closes_it(clock):
    port = free_port()
    backend = fast_backend(f"openai://127.0.0.1:{port}", retries=1, failure_threshold=3, reset_after=0.3)
    prm = PRMJudge(backend, "prm_generic", votes=2)
    async with asyncio.timeout(5):
        first = await prm.score("hi", STEP)
    assert not first.available and all(v.error.startswith("connection") for v in first.votes)
    assert backend.metrics["circuit_opened"] == 1 and not backend.available
    second = await prm.score("hi", STEP)  # refused at once, no connection attempted
    assert not second.available and all(v.error.startswith("circuit_open") for v in second.votes)
    assert backend.metrics["circuit_rejections"] == 2
    with ScriptedOpenAIServer() as srv:  # the endpoint comes back on another port; point the backend there
        srv.script = lambda body, n: Reply("\\boxed{1}")
        backend.base_url = normalize_base_url(srv.url)
        await backend.aclose()
        clock.now += 0.35
        third = await prm.score("hi", STEP)
    assert third.available and third.score == 1.0 and backend.available
    await backend.aclose()


def test_circuit_breaker_half_open_allows_one_trial(clock):
    breaker = CircuitBreaker(threshold=2, reset_after=0.05)
    assert breaker.allow() and not breaker.record_failure()
    assert breaker.record_failure() and not breaker.allow()
    clock.now += 0.04
    assert not breaker.allow()
    clock.now += 0.02
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    assert breaker.record_failure() and not breaker.allow()  # failed trial: open again
    clock.now += 0.06
    assert breaker.allow()
    breaker.record_success()
    assert breaker.allow() and breaker.allow() and breaker.failures == 0


async def test_make_judge_openai_runs_prm_and_hint_concurrently(server, monkeypatch):
    def script(body, n):
        if "[HINT_START]" in body["messages"][0]["content"]:
            hint = "The reply should match.\n[HINT_START]Reply with the exact phrase only.[HINT_END]\n\\boxed{1}"
            return Reply(hint, delay=0.3)
        return Reply("Mismatch. \\boxed{-1}", delay=0.3)

    server.script = all_at_once(6, script)
    monkeypatch.setenv("CLAW_JUDGE_MODEL", "env-model")
    monkeypatch.setenv("CLAW_JUDGE_API_KEY", "sk-env")
    judge = make_judge(f"openai://127.0.0.1:{server.httpd.server_port}", family="echo", votes=3)
    judgement = await judge.judge("hi", STEP, [{"role": "user", "content": "Repeat exactly: hello world"}])
    assert judgement.score == -1.0 and judgement.available and judgement.hint_available
    assert judgement.hint == "Reply with the exact phrase only."
    assert len(judgement.votes) == 3 and len(judgement.hint_votes) == 3
    assert server.max_in_flight == 6
    assert {r["model"] for r in server.requests} == {"env-model"}
    assert server.headers[0]["Authorization"] == "Bearer sk-env"
    counts = judge.metrics_dict()
    assert counts["steps"] == 1 and counts["hints_accepted"] == 1 and counts["votes"] == 6
    json.dumps(judgement.to_dict())
    await judge.aclose()


async def test_gui_screenshot_is_sent_as_a_data_url(server):
    action, ns = HAND_BUILT["gui"]
    backend = fast_backend(server.url)
    await PRMJudge(backend, "prm_gui", votes=1).score(action, ns)
    parts = server.requests[0]["messages"][1]["content"]
    assert parts[1]["type"] == "image_url" and parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    await backend.aclose()


async def test_missing_prompt_fields_are_a_failed_vote_not_an_exception(server):
    backend = fast_backend(server.url)
    judgement = await PRMJudge(backend, "prm_terminal", votes=2).score("ls", NextState("out"))
    assert not judgement.available and "task" in judgement.votes[0].error
    assert backend.metrics["prompt_errors"] == 1 and server.requests == []
    await backend.aclose()


async def test_the_real_openai_client_accepts_the_test_server(server):
    openai = pytest.importorskip("openai")
    server.script = lambda body, n: Reply("scripted \\boxed{0}")
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    completion = await client.chat.completions.create(
        model="judge-model", messages=[{"role": "user", "content": "hi"}], temperature=0.6, max_tokens=16
    )
    assert completion.choices[0].message.content == "scripted \\boxed{0}"
    ours = fast_backend(server.url)
    await PRMJudge(ours, "prm_generic", votes=1).score("hi", STEP)
    theirs, mine = server.requests
    assert {"model", "messages"} <= set(theirs) and {"model", "messages"} <= set(mine)
    await client.close()
    await ours.aclose()


class FakeCompletion:
    def __init__(self, text, finish_reason="stop"):
        self.text = text
        self.finish_reason = finish_reason


class LocalPolicy:
    """A policy-shaped object: answers from a script, records what it was asked."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.calls = []

    async def generate(self, prompt, sampling):
        self.calls.append((prompt, sampling))
        return await self.behaviour(len(self.calls) - 1)


async def test_policy_backend_asks_the_policy_and_flattens_images():
    async def answer(n):
        return FakeCompletion("\\boxed{1}")

    policy = LocalPolicy(answer)
    action, ns = HAND_BUILT["gui"]
    judge = make_judge("policy", family=JudgeTemplates(prm="prm_gui"), votes=2, policy=policy, hints=False)
    judgement = await judge.judge(action, ns)
    assert judgement.score == 1.0 and judgement.hint is None and judgement.hint_votes == []
    prompt, sampling = policy.calls[0]
    assert isinstance(prompt[1]["content"], str) and "screenshot was attached" in prompt[1]["content"]
    assert sampling.temperature == 0.6 and sampling.max_new_tokens == 1024


async def test_policy_backend_failures_are_contained():
    async def behaviour(n):
        if n == 0:
            raise RuntimeError("CUDA out of memory")
        if n == 1:
            return FakeCompletion("", finish_reason="error")
        if n == 2:
            return object()
        await asyncio.sleep(10)

    backend = PolicyBackend(LocalPolicy(behaviour), timeout=0.2, retries=0, failure_threshold=10)
    prm = PRMJudge(backend, "prm_generic", votes=1)
    errors = [(await prm.score("hi", STEP)).votes[0].error for _ in range(4)]
    assert "CUDA out of memory" in errors[0] and "finish_reason" in errors[1]
    assert errors[2].startswith("malformed") and errors[3].startswith("timeout")
    assert backend.metrics["unavailable"] == 4
    with pytest.raises(TypeError, match="generate"):
        PolicyBackend(object())


async def test_cancelling_a_judgement_cancels_its_votes():
    cancelled = []

    async def behaviour(n):
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(n)
            raise

    backend = PolicyBackend(LocalPolicy(behaviour), timeout=30, retries=0)
    task = asyncio.create_task(PRMJudge(backend, "prm_generic", votes=3).score("hi", STEP))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    assert sorted(cancelled) == [0, 1, 2]


async def test_backend_options_pass_through_make_judge(server):
    server.script = lambda body, n: Reply(status=500)
    judge = make_judge(server.url, family="terminal", votes=1, hints=False, timeout=0.5, retries=0, max_tokens=64)
    action, ns = HAND_BUILT["terminal"]
    judgement = await judge.judge(action, ns)
    assert not judgement.available and judge.metrics["retries"] == 0 and len(server.requests) == 1
    assert server.requests[0]["max_tokens"] == 64
    with pytest.raises(ValueError, match="takes no options"):
        make_backend("rules", timeout=1.0)
    await judge.aclose()


def test_specs_and_urls():
    assert normalize_base_url("openai://127.0.0.1:30000") == "http://127.0.0.1:30000/v1"
    assert normalize_base_url("openai://judge:8000/v1/") == "http://judge:8000/v1"
    assert normalize_base_url("https://api.example.com/v1") == "https://api.example.com/v1"
    assert normalize_base_url("openai+https://api.example.com") == "https://api.example.com/v1"
    for bad in ("openai://", "ftp://x", "openai://host:notaport"):
        with pytest.raises(ValueError, match=r"openai://HOST:PORT|bad port"):
            normalize_base_url(bad)
    with pytest.raises(ValueError, match="unknown judge 'gpt'"):
        make_judge("gpt", family="echo")
    with pytest.raises(ValueError, match="needs the policy"):
        make_judge("policy", family="echo")
    assert make_backend("rules").name == "rules"
    assert isinstance(BackendError("timeout", "x", retryable=True), Exception)
