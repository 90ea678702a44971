"""``claw-view``'s command line and access rules on a small synthetic run folder: bad folders and addresses are one
clear line and exit 2; with an API key the page and the API need it (once as ``?key=``, then a cookie)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from claw_train.commands.view import main
from claw_train.view.runs import RunIndex
from claw_train.view.server import ViewServer, listen
from claw_train.view.synthetic import write_synthetic_run

CLAW_VIEW = str(Path(sys.executable).parent / "claw-view")
KEY = "s3cret-view-key"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("small") / "run", turns=60, versions=3)


@pytest.fixture
def claw_view(capsys, monkeypatch):
    """``claw-view ARGS`` in this process: its exit code and what it printed to stderr."""
    monkeypatch.delenv("CLAW_API_KEY", raising=False)

    def run(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().err

    return run


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "missing", "no such folder"),
        (lambda tmp: (tmp / "file.txt").write_text("x") and tmp / "file.txt", "not a folder"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "not a run folder (none of run.json, logs/"),
    ],
)
def test_a_folder_that_is_not_a_run_is_one_clear_line(claw_view, tmp_path, make, message):
    code, err = claw_view(str(make(tmp_path)), "--port", "0")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_non_loopback_bind_without_a_key_is_refused(claw_view, small_run):
    for host in ("0.0.0.0", "192.0.2.1"):
        code, err = claw_view(str(small_run), "--host", host, "--port", "0")
        assert code == 2 and "refusing to listen" in err and "API key" in err
    code, err = claw_view(str(small_run), "--port", "70000")
    assert code == 2 and "--port must be a TCP port" in err
    code, err = claw_view()
    assert code == 2 and "give at least one run folder" in err


def test_the_command_serves_the_page_and_says_where(small_run):
    proc = subprocess.Popen(
        [CLAW_VIEW, str(small_run), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("claw-view: http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[1]
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "/static/vendor/uplot/uPlot.iife.min.js" in page.text
        for asset in ("static/vendor/uplot/uPlot.iife.min.js", "static/vendor/tabulator/tabulator.min.js"):
            assert httpx.get(url + asset, timeout=10).status_code == 200  # served from the package, no network
        runs = httpx.get(url + "api/runs", timeout=10).json()
        assert runs[0]["counts"]["turns"] == 60 and runs[0]["env"] == "claw/Conversation-v0"
    finally:
        proc.terminate()
        proc.wait(30)


def test_with_a_key_every_route_but_healthz_needs_it(small_run):
    server = ViewServer([RunIndex(small_run)], listen("127.0.0.1", 0), key=KEY, every=0.25)
    url = server.start()
    try:
        with httpx.Client(base_url=url, timeout=10, follow_redirects=True) as client:
            assert client.get("/healthz").status_code == 200
            for path in ("/", "/api/runs", "/api/turns", "/static/view.js"):
                assert client.get(path).status_code == 401, path
            assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert client.get("/api/runs", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
            assert client.get("/?key=wrong").status_code == 401
            opened = client.get(f"/?key={KEY}")  # sets the cookie, then the page's own requests carry it
            assert opened.status_code == 200 and "claw-view" in opened.text
            assert client.get("/api/runs").status_code == 200
            assert client.get("/api/runs", headers={"Host": "far.example"}).status_code == 200  # the key, not the name
    finally:
        server.stop()


def test_beside_a_run_it_serves_the_folder_in_its_own_process_and_stops_with_close(small_run):
    from claw_train.view.launch import Beside

    viewer = Beside(small_run)
    try:
        assert viewer.url.startswith("http://127.0.0.1:")
        assert httpx.get(viewer.url + "api/runs", timeout=10).json()[0]["counts"]["turns"] == 60
        assert os.getpriority(os.PRIO_PROCESS, viewer.proc.pid) >= 10  # behind the run
    finally:
        viewer.close()
    assert viewer.proc.poll() is not None
    with pytest.raises(RuntimeError, match=r"claw-view did not start: claw-view: .*no such folder"):
        Beside(small_run.parent / "missing")


def test_claw_eval_sessions_needs_a_run_folder_with_prompts(tmp_path, small_run, capsys):
    from claw_train.commands.evaluate import main as claw_eval

    assert claw_eval(["--sessions", str(tmp_path)]) == 2
    assert "not a run folder (no readable run.json)" in " ".join(capsys.readouterr().out.split())
    assert claw_eval(["--sessions", str(small_run)]) == 2  # synthetic turns log no prompts
    assert "its turns do not log their prompts" in " ".join(capsys.readouterr().out.split())
