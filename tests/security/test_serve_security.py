"""claw-serve as an attacker and an unlucky client meet it (issue #16): each finding reproduced against a real uvicorn
server on 127.0.0.1 in front of the tiny model, with the real ``openai`` client where a client is used.

* **Key**: with an API key set, requests without it or with a wrong one are 401 (OpenAI error shape) — nothing is
  served, logged, judged or trained — while the right key serves and trains; the key never reaches run.json.
* **Bind**: a non-loopback ``--host`` without a key is refused (exit 2, before a model is loaded); with
  ``CLAW_API_KEY`` it serves, to key holders only.
* **Keyless, this machine only**: without a key only a ``Host`` that is a loopback literal is answered — a name
  whose DNS answers 127.0.0.1 (DNS rebinding), ``0.0.0.0``, ``127.1`` are 403s, and no name is looked up — and an
  ``Origin`` must be a loopback page on the server's port; ``/healthz`` stays open.
* **JSON only**: a POST not declared ``application/json`` (``text/plain``, a form, none) is a 415, key or not, served
  and trained on never; no route grants CORS.
* **Body**: a 50 MB body is refused with 413 in well under a second, by its Content-Length or (chunked) as soon as
  the bytes read pass the limit, while ``/healthz`` keeps answering at once.
* **Malformed input**: deep nesting, lone surrogates, NaN, tiny ``top_p``/``temperature``, huge seeds, string
  booleans... each a 400 in the OpenAI error shape, none a 5xx, none counted as a policy failure.
* **Streaming**: token by token — several content chunks whose concatenation is the non-streamed reply for the same
  seed; a streamed main turn records exactly the streamed text.
* **Fuzz**: schemathesis, from the server's own OpenAPI schema (positive and negative cases, derandomized): no 5xx,
  the OpenAI error shape on every 4xx, every documented status and content type, and no route but ``/healthz``
  answering without the key.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

pytest.importorskip("trl")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
import httpx  # noqa: E402
from loopback_names import ANSWERED, rebound_name, status_without_host  # noqa: E402
from test_serve import Server, converse, free_port, launch_cli, wait_for  # noqa: E402

from claw_train.access import is_loopback  # noqa: E402
from claw_train.options.resolve import build  # noqa: E402
from claw_train.options.tree import ServeArgs  # noqa: E402
from claw_train.pipeline import RunError  # noqa: E402
from claw_train.serve import serve  # noqa: E402
from claw_train.serve.app import check_bind  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEY = "s3cret-" + uuid.uuid4().hex
CLAW_SERVE = str(Path(sys.executable).parent / "claw-serve")
LIMIT = 4 << 20  # the default --max-body-bytes


@pytest.fixture(scope="module")
def model_path() -> str:
    from claw_train.models.tiny import bootstrap

    return str(bootstrap("conversation", steps=2, progress=False))


def make_server(model_path: str, out: Path, **options: Any) -> Server:
    values = {"env": "conversation", "model": "tiny", "port": 0, "output_dir": out, "report_to": "none"}
    values |= {"max_new_tokens": 16, "request_timeout": 60, "api_key": KEY} | options
    return Server(build(ServeArgs, command="serve", **values), model_path=model_path)


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    srv = make_server(model_path, tmp_path_factory.mktemp("secure") / "run", samples_per_step=2, judge_workers=2)
    # the trainer thread builds its model at start (pure Python for a few hundred ms, holding the GIL): latency
    # checks measure the server, not that
    wait_for(lambda: srv.pipeline.stats.status == "training", what="the trainer")
    time.sleep(1.0)
    yield srv
    srv.stop()
    assert srv.result.status == "interrupted"


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    """The response's OpenAI-shaped error (asserting the status and the shape)."""
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str), error
    assert error["message"] and isinstance(error["type"], str)
    return error


# -- the API key --------------------------------------------------------------------------------------


def test_without_the_key_nothing_is_served_logged_or_trained(server):
    before = server.metrics()
    bad_keys = ["wrong", KEY[:-1], KEY + "x", KEY.upper(), "Bearer " + KEY]
    for key in bad_keys:  # the real client, a whole learnable conversation each time
        for session in (f"anon-{uuid.uuid4().hex[:6]}", None):
            with pytest.raises(openai.AuthenticationError) as err:
                converse(server.client(session, key=key), ["thanks, perfect!", "Shorter, please."], max_tokens=8)
            assert err.value.status_code == 401
    msgs = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    for auth in ("", f"Basic {KEY}", f"Bearer{KEY}", "Bearer é".encode("latin-1"), f"bearer  {KEY}x", KEY):
        r = server.post(msgs, headers={"Authorization": auth, "X-Session-Id": "anon"}, key=None)
        assert openai_error(r, 401)["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/models", "/metrics", "/openapi.json"):
        assert openai_error(httpx.get(server.root + path), 401)["code"] == "invalid_api_key"
    assert httpx.get(f"{server.root}/healthz").json()["status"] == "ok"  # a probe needs no key
    after = server.metrics()
    assert after["counts"].get("requests", 0) == before["counts"].get("requests", 0) == 0
    assert after["counts"]["unauthorized"] >= 2 * len(bad_keys) + 8
    assert after["updates"] == 0 and after["version"] == 0
    assert not [r for r in server.logs() if r["kind"] in ("turn", "one_off", "side")]
    # the right key serves and trains: the refusals above were the key's doing
    replies = ["thanks, that is perfect!", "Don't use bold. Write it shorter."]
    out = converse(server.client("owner"), replies, max_tokens=8)
    assert len(out) == 3
    wait_for(lambda: server.metrics()["updates"] >= 1, what="a trainer step from the key holder's turns")
    assert KEY not in (server.cfg.run.output_dir / "run.json").read_text()


def test_a_non_loopback_bind_needs_a_key(model_path, tmp_path):
    for host in ("127.0.0.1", "::1", "localhost", "127.8.9.10"):
        assert is_loopback(host)
        check_bind(host, "")
    for host in ("0.0.0.0", "::", "", "192.0.2.1", "no-such-host.invalid"):
        assert not is_loopback(host)
        with pytest.raises(RunError, match="API key"):
            check_bind(host, "")
        check_bind(host, KEY)
    env = {k: v for k, v in os.environ.items() if k != "CLAW_API_KEY"} | {"PYTHONUNBUFFERED": "1"}
    for host in ("0.0.0.0", "::"):
        started = time.monotonic()
        argv = [CLAW_SERVE, "--model", model_path, "--host", host, "--port", "0", "--output-dir", str(tmp_path / "x")]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "without an API key" in proc.stderr and "CLAW_API_KEY" in proc.stderr
        assert time.monotonic() - started < 60 and not (tmp_path / "x").exists()  # refused before loading a model
    with pytest.raises(RunError, match="without an API key"):  # the library refuses too
        asyncio.run(serve(build(ServeArgs, command="serve", env="conversation", host="0.0.0.0", port=0)))
    # with CLAW_API_KEY it listens beyond loopback, for key holders only
    port = free_port()
    argv = [CLAW_SERVE, "--model", model_path, "--host", "0.0.0.0", "--port", str(port), "--no-train"]
    argv += ["--output-dir", str(tmp_path / "open"), "--max-new-tokens", "4"]
    proc, started = launch_cli(argv, env | {"CLAW_API_KEY": KEY})
    try:
        assert f"http://0.0.0.0:{port}/v1" in started, started
        url = f"http://127.0.0.1:{port}/v1"
        msgs = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="guess", max_retries=0).chat.completions.create(
                model="t", messages=msgs
            )
        reply = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0).chat.completions.create(
            model="t", messages=msgs
        )
        assert reply.choices[0].message.role == "assistant"
        proc.send_signal(2)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert KEY not in started + rest and KEY not in (tmp_path / "open" / "run.json").read_text()


# -- keyless: this machine's own clients only -----------------------------------------------------------


@pytest.fixture(scope="module")
def keyless(model_path, tmp_path_factory):
    """A server without an API key (so on loopback), training from its sessions."""
    srv = make_server(model_path, tmp_path_factory.mktemp("keyless") / "run", api_key="", samples_per_step=2)
    assert srv.key is None
    yield srv
    srv.stop()


def post_as(srv: Server, content_type: str | None, body: bytes, **headers: str) -> httpx.Response:
    """POST ``body`` to the chat route declared as ``content_type`` (None: no Content-Type header at all)."""
    sent = {"Authorization": f"Bearer {srv.key}"} if srv.key else {}
    sent |= {"Content-Type": content_type} if content_type is not None else {}
    r = httpx.post(f"{srv.url}/chat/completions", content=body, headers=sent | headers, timeout=60)
    assert r.request.headers.get("content-type") == content_type
    return r


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_a_keyless_server_answers_this_machine_by_name_only(keyless):
    """DNS rebinding: a page on a domain whose DNS answers 127.0.0.1 (here an /etc/hosts entry) reaches the port with
    its own name in ``Host``. Keyless, only a loopback literal is answered and no name is ever looked up; ``/healthz``
    stays open."""
    port = keyless.port
    with rebound_name() as rebound:
        for host in (f"[::1]:{port}", f"localhost.:{port}", f"LOCALHOST:{port}", "localhost", f"127.0.0.1:{port}"):
            assert httpx.get(f"{keyless.root}/v1/models", headers={"Host": host}).status_code == 200, host
            assert keyless.post(CHAT, headers={"Host": host}).status_code == 200, host
        refused = ("127.1", f"127.1:{port}", "0.0.0.0", f"0.0.0.0:{port}", f"[::ffff:127.0.0.1]:{port}", "")
        for host in (*refused, rebound.name, f"{rebound.name}:{port}", f"{rebound.name.upper()}.", "evil.example"):
            for path in ("/v1/models", "/metrics", "/openapi.json"):
                error = openai_error(httpx.get(keyless.root + path, headers={"Host": host}), 403)
                assert ANSWERED in error["message"] and error["code"] == "not_loopback", (host, error)
            r = keyless.post(CHAT | {"user": "rebound"}, headers={"Host": host})
            assert openai_error(r, 403)["code"] == "not_loopback"
        client = openai.OpenAI(base_url=keyless.url, api_key="x", max_retries=0, default_headers={"Host": rebound.name})
        with pytest.raises(openai.PermissionDeniedError):  # the real client, as a rebinding page would drive it
            client.chat.completions.create(model="tiny", messages=CHAT["messages"], user="rebound")
        assert status_without_host(port, "/v1/models") == 403
        assert httpx.get(f"{keyless.root}/healthz", headers={"Host": rebound.name}).json()["status"] == "ok"
        assert not rebound.lookups, rebound.lookups  # the server never asked a resolver
    assert "rebound" not in {r.get("group") for r in keyless.logs()}


def test_a_keyless_server_answers_pages_of_this_machine_on_its_port_only(keyless, server):
    """A browser names the page behind a request in ``Origin``: keyless, only a loopback page on this very port is
    answered (another local port is another program); with a key the key decides."""
    port = keyless.port
    for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}", f"https://[::1]:{port}"):
        assert httpx.get(f"{keyless.root}/v1/models", headers={"Origin": origin}).status_code == 200, origin
    assert keyless.post(CHAT, headers={"Origin": f"http://localhost:{port}"}).status_code == 200
    for origin in ("null", "http://evil.example", f"http://127.0.0.1:{port + 1}", "http://localhost", "file://"):
        error = openai_error(httpx.get(f"{keyless.root}/v1/models", headers={"Origin": origin}), 403)
        assert "Origin" in error["message"] and ANSWERED in error["message"], error
        assert openai_error(keyless.post(CHAT, headers={"Origin": origin}), 403)["code"] == "not_loopback"
    assert server.post(CHAT, headers={"Origin": "http://evil.example", "Host": "far.example"}).status_code == 200


def test_a_post_is_json_or_a_415_neither_served_nor_trained(keyless, server):
    """A cross-site ``text/plain`` (or form) POST needs no CORS preflight, so a web page could send a JSON body under
    it: it is a 415 before the body is read, keyless or not — nothing served, no session, no turn."""
    session = f"cross-site-{uuid.uuid4().hex[:6]}"
    body = json.dumps(CHAT | {"user": session}).encode()
    for srv in (keyless, server):
        before = srv.metrics()
        for kind in (
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "",
            None,
        ):
            error = openai_error(post_as(srv, kind, body, Origin=f"http://localhost:{srv.port}"), 415)
            assert error["code"] == "unsupported_media_type" and "application/json" in error["message"], error
        after = srv.metrics()
        assert after["counts"].get("requests", 0) == before["counts"].get("requests", 0)
        assert after["sessions"] == before["sessions"]
        assert session not in {r.get("group") for r in srv.logs()}
        for kind in ("application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"):
            assert post_as(srv, kind, json.dumps(CHAT).encode()).status_code == 200, kind
        assert srv.metrics()["counts"]["requests"] == after["counts"].get("requests", 0) + 3


def test_no_route_grants_cors(keyless, server):
    """A preflight (OPTIONS with ``Origin`` and ``Access-Control-Request-Method``) is never granted: no
    ``Access-Control-Allow-*`` header, from a foreign page or a local one, keyless or not."""
    for srv in (keyless, server):
        for origin in ("http://evil.example", f"http://localhost:{srv.port}"):
            for path in ("/v1/chat/completions", "/v1/models"):
                asked = {"Origin": origin, "Access-Control-Request-Method": "POST"}
                asked["Access-Control-Request-Headers"] = "content-type, authorization"
                r = httpx.options(srv.root + path, headers=asked, timeout=10)
                assert r.status_code in (403, 405), (origin, path, r.status_code, r.text[:200])
                assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers


# -- the request body limit -------------------------------------------------------------------------------


class HealthProbe:
    """Polls ``/healthz`` from a thread over plain sockets, recording when each request went out and when its answer
    was in (monotonic seconds); ``done()`` stops it and returns those spans."""

    def __init__(self, port: int):
        self.port, self.spans, self.stop = port, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                reply = b""
                while data := sock.recv(65536):
                    reply += data
            assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
            self.spans.append((started, time.monotonic()))
            time.sleep(0.005)

    def done(self) -> list[tuple[float, float]]:
        self.stop.set()
        self.thread.join(30)
        assert self.spans, "no /healthz answer"
        return self.spans


@dataclass
class Upload:
    """What :func:`raw_post` saw: when it began, when the status line came back, the body bytes written, whether the
    server cut the upload off (a write failed before the whole body was sent), and the response."""

    started: float
    answered: float
    sent: int
    cut_off: bool
    reply: bytes

    def answered_during(self, spans: list[tuple[float, float]]) -> int:
        """How many of a probe's requests were sent and answered while this upload was under way."""
        return sum(self.started < began and ended < self.answered for began, ended in spans)


def big_body(size: int) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "x" * (size - 60)}]}).encode()


def raw_post(
    port: int, content: bytes, *, chunked: bool, key: str = KEY, piece: int = 1 << 20, pause: float = 0.0
) -> Upload:
    """POST ``content`` over a plain socket (declared by Content-Length, or chunked), sending it from another thread
    in ``piece``-byte writes ``pause`` seconds apart (0: as fast as the server reads)."""
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
    head += "Content-Type: application/json\r\nConnection: close\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {len(content)}\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent, cut_off = [0], [False]

    def send() -> None:
        try:
            sock.sendall(head.encode())
            for i in range(0, len(content), piece):
                part = content[i : i + piece]
                sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n" if chunked else part)
                sent[0] += len(part)
                time.sleep(pause)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: the rest is not wanted
            cut_off[0] = True

    started = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    reply = b""
    while b"\r\n\r\n" not in reply:
        data = sock.recv(65536)
        assert data, reply
        reply += data
    answered = time.monotonic()
    sock.settimeout(5)
    try:
        while data := sock.recv(65536):
            reply += data
    except OSError:
        pass
    sock.close()
    sender.join(30)
    return Upload(started, answered, sent[0], cut_off[0], reply)


def too_large(reply: bytes) -> dict:
    """The OpenAI-shaped error of a raw 413 reply."""
    status, _, rest = reply.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413"), reply[:300]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_50mb_body_is_refused_before_it_is_read_while_healthz_answers(server, chunked):
    """Refused from its Content-Length before any of it is read or, chunked, once the bytes read pass the limit: the
    rest of the upload is cut off (50 MB is more than the limit plus what a loopback connection's buffers can hold:
    4 MiB + at most 32 + 4 MiB here), and the server goes on answering. Checked by bytes, not by a time (the README's
    timings come from ``bench/serve_limits.py``)."""
    content = big_body(50_000_000)  # built first: the probe shares this process
    probe = HealthProbe(server.port)
    time.sleep(0.2)
    upload = raw_post(server.port, content, chunked=chunked)
    too_large(upload.reply)
    assert upload.cut_off and upload.sent < len(content), upload
    probe.done()  # every /healthz asked during it answered 200
    assert httpx.get(f"{server.root}/healthz").json()["status"] == "ok"  # and after it
    # the real client gets the same answer, in the OpenAI shape
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 50_000_000}]}
    assert openai_error(server.post(big, headers={"X-Session-Id": "big"}), 413)["code"] == "request_too_large"


def test_bodies_near_the_limit(server):
    """Just over the limit: 413; just under, a prompt far past the context: a 400 refused on its character count,
    before it is tokenised (the message says so; not a time, which a loaded machine stretched past 1 s once); a slow
    chunked upload is cut off once past the limit, /healthz answering while it goes on; without the key a big body is
    a 401 before it is read."""
    pad = {"model": "tiny", "messages": [{"role": "user", "content": ""}]}
    overhead = len(json.dumps(pad))
    over = {"model": "tiny", "messages": [{"role": "user", "content": "x" * (LIMIT - overhead + 1)}]}
    assert len(json.dumps(over)) == LIMIT + 1
    assert openai_error(server.post(over), 413)["code"] == "request_too_large"
    under = {"model": "tiny", "messages": [{"role": "user", "content": "x" * (LIMIT - overhead)}]}
    slow = big_body(16_000_000)  # built first: the probe shares this process
    probe = HealthProbe(server.port)
    for session in ("near-limit", None):
        r = server.post(under, headers={"X-Session-Id": session} if session else {})
        said = openai_error(r, 400)["message"]
        assert said.startswith(f"the prompt has {LIMIT - overhead} characters: more tokens than the model's context")
    # 64 KiB every 10 ms: the server reads it as it comes (at least 64 pieces before the limit), so a /healthz asked
    # and answered within those pieces shows the upload does not hold up the event loop
    upload = raw_post(server.port, slow, chunked=True, piece=1 << 16, pause=0.01)
    too_large(upload.reply)
    assert upload.cut_off and upload.sent < len(slow), upload
    spans = probe.done()
    answered = upload.answered_during(spans)
    print(f"\nnear the limit: 413 after {upload.answered - upload.started:.2f} s of a slow upload; {answered} /healthz")
    assert answered >= 1, spans
    assert openai_error(server.post(over, key="nope"), 401)["code"] == "invalid_api_key"


# -- malformed input --------------------------------------------------------------------------------------

HI = [{"role": "user", "content": "hi"}]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MALFORMED: list[tuple[str, bytes | dict[str, Any], str | None]] = [
    ("deep-json-body", _nested(100_000).encode(), None),
    ("deep-json-in-content", f'{{"messages": [{{"role": "user", "content": {_nested(5000)}}}]}}'.encode(), None),
    (
        "deep-json-in-tools",
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": ' + _nested(70).encode() + b"}",
        None,
    ),
    (
        "deep-tool-parameters",
        {
            "messages": HI,
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": json.loads('{"a":' * 80 + "1" + "}" * 80)}}
            ],
        },
        None,
    ),
    ("lone-surrogate-content", b'{"messages": [{"role": "user", "content": "hi \\ud800 there"}]}', None),
    ("lone-low-surrogate", b'{"messages": [{"role": "user", "content": "\\udfff"}]}', None),
    ("lone-surrogate-key", b'{"messages": [{"role": "user", "content": "hi", "\\ud83d": 1}]}', None),
    ("lone-surrogate-model", b'{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}', None),
    ("invalid-utf8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', None),
    ("nan", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', None),
    ("infinity", b'{"messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}', None),
    ("huge-int", b'{"messages": [{"role": "user", "content": "hi"}], "seed": 1' + b"0" * 5000 + b"}", None),
    ("top_p-1e-300", {"messages": HI, "top_p": 1e-300}, "top_p"),
    ("top_p-5e-324", {"messages": HI, "top_p": 5e-324}, "top_p"),
    ("top_p-1e-7", {"messages": HI, "top_p": 1e-7}, "top_p"),
    ("top_p-0", {"messages": HI, "top_p": 0}, "top_p"),
    ("top_p-1.5", {"messages": HI, "top_p": 1.5}, "top_p"),
    ("top_p-string", {"messages": HI, "top_p": "0.5"}, "top_p"),
    ("temperature-1e-300", {"messages": HI, "temperature": 1e-300}, "temperature"),
    ("temperature-negative", {"messages": HI, "temperature": -0.1}, "temperature"),
    ("seed-2**80", {"messages": HI, "seed": 2**80}, "seed"),
    ("seed-2**63", {"messages": HI, "seed": 2**63}, "seed"),
    ("seed-negative", {"messages": HI, "seed": -1}, "seed"),
    ("seed-float", {"messages": HI, "seed": 1.5}, "seed"),
    ("seed-bool", {"messages": HI, "seed": True}, "seed"),
    ("stream-string-false", {"messages": HI, "stream": "false"}, "stream"),
    ("stream-string-true", {"messages": HI, "stream": "true"}, "stream"),
    ("stream-int", {"messages": HI, "stream": 1}, "stream"),
    ("stream_options-string", {"messages": HI, "stream": True, "stream_options": "yes"}, "stream_options"),
    (
        "include_usage-string",
        {"messages": HI, "stream_options": {"include_usage": "no"}},
        "stream_options.include_usage",
    ),
    ("max_tokens-float", {"messages": HI, "max_tokens": 8.5}, "max_tokens"),
    ("max_tokens-string", {"messages": HI, "max_tokens": "8"}, "max_tokens"),
    ("max_tokens-bool", {"messages": HI, "max_tokens": True}, "max_tokens"),
    ("max_tokens-zero", {"messages": HI, "max_tokens": 0}, "max_tokens"),
    ("max_completion_tokens-negative", {"messages": HI, "max_completion_tokens": -1}, "max_completion_tokens"),
    ("n-bool", {"messages": HI, "n": True}, "n"),
    ("n-two", {"messages": HI, "n": 2}, "n"),
    ("stop-number", {"messages": HI, "stop": 5}, "stop"),
    ("stop-too-many", {"messages": HI, "stop": [str(i) for i in range(17)]}, "stop"),
    ("model-object", {"messages": HI, "model": {"name": "tiny"}}, "model"),
    ("model-too-long", {"messages": HI, "model": "m" * 300}, "model"),
    ("user-number", {"messages": HI, "user": 7}, "user"),
    ("user-too-long", {"messages": HI, "user": "u" * 300}, "user"),
    (
        "content-part-not-text",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": {"a": 1}}]}]},
        "messages",
    ),
    (
        "content-part-image",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages",
    ),
    ("name-number", {"messages": [{"role": "user", "content": "hi", "name": 3}]}, "messages"),
    (
        "tool_calls-not-list",
        {"messages": [{"role": "assistant", "content": None, "tool_calls": "call"}, *HI]},
        "messages",
    ),
    (
        "tool_calls-bad-function",
        {"messages": [{"role": "assistant", "tool_calls": [{"function": 5}]}, *HI]},
        "messages",
    ),
    (
        "tool_calls-on-user",
        {"messages": [{"role": "user", "content": "hi", "tool_calls": [{"function": {"name": "f"}}]}]},
        "messages",
    ),
    ("tools-bad-type", {"messages": HI, "tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools"),
    (
        "tools-bad-parameters",
        {"messages": HI, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
        "tools",
    ),
    ("messages-object", {"messages": {"role": "user", "content": "hi"}}, "messages"),
    ("body-string", b'"hello"', None),
    ("body-empty", b"", None),
]


@pytest.mark.parametrize(("body", "param"), [(b, p) for _, b, p in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_input_is_an_openai_400(server, body, param):
    for session in ("malformed", None):
        r = server.post(body, headers={"X-Session-Id": session} if session else {})
        error = openai_error(r, 400)
        assert error["type"] == "invalid_request_error" and error["param"] == param, error


def test_malformed_input_is_never_a_policy_failure(server):
    before = server.metrics()["counts"]
    for _, body, _ in MALFORMED[:20]:
        assert server.post(body, headers={"X-Session-Id": "count"}).status_code == 400
    counts = server.metrics()["counts"]
    assert counts.get("policy_errors", 0) == before.get("policy_errors", 0) == 0
    assert counts.get("errors_5xx", 0) == 0 and counts.get("policy_timeouts", 0) == 0


def test_odd_but_valid_input_is_served(server):
    """Edge values that are valid: served (200), headers that echo them stay well-formed."""
    cases = [
        {"messages": HI, "top_p": 1e-6, "temperature": 1e-6, "seed": 2**63 - 1, "max_tokens": 2**80},
        {"messages": HI, "temperature": 0, "seed": 0, "stream": False, "n": 1, "stop": ["", "\u00e9"]},
        {"messages": HI, "user": "usér\n\u2028日本", "model": "modèle\r\nX-Evil: 1"},
        {"messages": [{"role": "user", "content": "\U0001f600 emoji \x00 nul"}], "max_tokens": 2},
        {"messages": [{"role": "assistant", "content": None}, {"role": "tool", "content": "x", "tool_call_id": "1"}]},
    ]
    for body in cases:
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        r = server.post(raw)
        assert r.status_code == 200, r.text
        assert r.json()["object"] == "chat.completion"
    r = server.post({"messages": HI, "user": "usér\n日本"})
    assert r.headers["x-session-id"] == "us%C3%A9r%0A%E6%97%A5%E6%9C%AC"
    r = server.post({"messages": HI}, headers={"X-Session-Id": "s" * 300})
    assert openai_error(r, 400)["param"] == "X-Session-Id"
    assert server.metrics()["counts"].get("errors_5xx", 0) == 0


# -- streaming ----------------------------------------------------------------------------------------------


def test_streaming_is_token_by_token_and_matches_the_plain_reply(server):
    client = server.client()
    msgs = [{"role": "user", "content": "Tell me about cats."}]
    for seed in range(20):
        for _ in range(5):  # weights may swap between the two requests (the trainer runs): compare one version
            plain = client.chat.completions.create(
                model="tiny", messages=msgs, seed=seed, max_tokens=16, temperature=1.0
            )
            chunks = list(
                client.chat.completions.create(
                    model="tiny", messages=msgs, seed=seed, max_tokens=16, temperature=1.0, stream=True
                )
            )
            if chunks[-1].system_fingerprint == plain.system_fingerprint:
                break
        if plain.usage.completion_tokens >= 4 and plain.choices[0].finish_reason == "length":
            break
    text = plain.choices[0].message.content
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(pieces) > 1, pieces  # token by token, not one chunk with the whole reply
    assert "".join(pieces) == text
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert len({c.id for c in chunks}) == 1


def test_a_streamed_main_turn_records_the_streamed_text(server):
    session = f"stream-{uuid.uuid4().hex[:6]}"
    client = server.client(session)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 2?"}]
    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in chunks) >= 1
    msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": "thanks!"}]
    client.chat.completions.create(model="tiny", messages=msgs, max_tokens=4)

    def turns() -> list[dict[str, Any]]:
        return [r for r in server.logs() if r["kind"] == "turn" and r["group"] == session]

    (turn,) = wait_for(turns, what="the streamed turn's record")
    assert turn["action"] == text and turn["next_state"]["text"] == "thanks!"


def test_stream_with_tools_and_errors_keep_the_shape(server):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    chunks = list(
        server.client().chat.completions.create(model="tiny", messages=HI, max_tokens=6, stream=True, tools=[weather])
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason
    r = server.post({"messages": HI, "stream": True, "top_p": 1e-300})  # invalid: a JSON 400, not an event stream
    assert openai_error(r, 400)["param"] == "top_p"


# -- schemathesis ------------------------------------------------------------------------------------------


schemathesis = pytest.importorskip("schemathesis")
FUZZ_EXAMPLES = int(os.environ.get("CLAW_SERVE_FUZZ_EXAMPLES", 100))


def served_openapi() -> dict[str, Any]:
    """The OpenAPI document the server publishes, built here at import (schemathesis parametrizes from it before
    any server runs); the test checks the served one is the same."""
    from types import SimpleNamespace

    from claw_train.serve.app import create_app

    stub = SimpleNamespace(stats=None)  # the routes are described, never called
    return create_app(stub, "tiny", key=KEY).openapi()  # type: ignore[arg-type]


def _fuzz_schema() -> Any:
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig.from_dict(
        {
            "seed": 16,
            "generation": {"max-examples": FUZZ_EXAMPLES, "mode": "all"},
            "phases": {"stateful": {"enabled": False}},
            # a body the schema allows may still be a 400 (the last message must be the user's or a tool's)
            "checks": {"positive_data_acceptance": {"enabled": False}},
            "headers": {"Authorization": f"Bearer {KEY}"},
            "request-timeout": 60,
        }
    )
    return schemathesis.openapi.from_dict(served_openapi(), config=config)


@schemathesis.check
def openai_error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx and 5xx is an OpenAI error: ``{"error": {"message", "type", "param", "code"}}``."""
    if response.status_code >= 400:
        assert response.headers.get("content-type", [""])[0].startswith("application/json"), response.headers
        error = json.loads(response.content)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], error
    return None


@schemathesis.check
def no_5xx(ctx: Any, response: Any, case: Any) -> bool | None:
    assert response.status_code < 500, (response.status_code, response.content[:500])
    return None


@pytest.fixture(scope="module")
def fuzz_server(model_path, tmp_path_factory):
    """Not training (the fuzz is about the HTTP surface; a trainer would only slow it), the real tiny model."""
    srv = make_server(model_path, tmp_path_factory.mktemp("fuzz") / "run", train=False, max_new_tokens=2)
    assert httpx.get(f"{srv.root}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json() == served_openapi()
    yield srv
    counts = srv.metrics()["counts"]
    print(f"\nfuzzed: {counts.get('requests', 0)} requests served, {counts.get('errors_4xx', 0)} refused (4xx)")
    assert counts.get("errors_5xx", 0) == 0
    srv.stop()


FUZZ = _fuzz_schema()


@FUZZ.parametrize()
@settings(derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_schemathesis_fuzz(case, fuzz_server):
    case.call_and_validate(base_url=fuzz_server.root, additional_checks=[no_5xx, openai_error_shape])
