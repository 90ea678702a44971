"""The README's commands and code run as written (issue 47): its environment example, and its train / evaluate /
serve / view block in a fresh folder holding the files it names, with a fast configuration appended to the training
commands and the server's port swapped for a free one. ``make demo`` is measured by ``bench/demo.py`` (its
configuration's signal by ``test_demo_signal``), ``make test`` is this suite, and the GPU block runs in
``test_practitioner`` against local stand-ins for the servers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("trl")

from test_serve import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
FAST = ["--updates", "1", "--samples-per-step", "4", "--report-to", "none", "--max-new-tokens", "24", "--no-display"]


def section_blocks(title: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of the README section headed ``title``."""
    start = README.index(f"\n{title}\n")
    end = README.find("\n## ", start + 1)
    return re.findall(rf"```{lang}\n(.*?)```", README[start : end if end > 0 else None], flags=re.S)


def commands(block: str) -> list[list[str]]:
    """Each command line of a bash block, its comment cut off, split into words."""
    return [line.split("#")[0].split() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_environment_example_runs_and_prints_what_its_comments_say(capsys):
    (code,) = section_blocks("## An environment", "python")
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "user -1.0 Don't use any bold text.", printed


def test_train_evaluate_serve_and_view_run_as_written(tmp_path):
    from claw_train.models.tiny import bootstrap

    bash, python = (
        section_blocks("## Train, evaluate, serve", "bash")[0],
        section_blocks("## Train, evaluate, serve", "python")[0],
    )
    rows = [{"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(8)]
    (tmp_path / "my_problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copytree(bootstrap("echo", steps=2, progress=False), tmp_path / "my-model")  # a save_pretrained folder
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    lines = commands(bash)
    assert [line[0] for line in lines] == ["claw-train", "claw-train", "claw-eval", "claw-serve", "claw-view"], lines
    for argv in lines[:3]:
        argv = [str(BIN / argv[0]), *argv[1:], *(FAST if argv[0] == "claw-train" else [])]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert done.returncode == 0, " ".join(argv) + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "runs" / "chat" / "summary.json").is_file() and (tmp_path / "runs" / "mine").is_dir()

    port = free_port()
    serve = [str(BIN / "claw-serve"), *(str(port) if a == "8000" else a for a in lines[3][1:])]
    serve += ["--samples-per-step", "2", "--max-new-tokens", "8"]
    proc = subprocess.Popen(serve, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        started = "".join(line for line in _until(proc, "claw-serve: serving"))
        assert f"http://127.0.0.1:{port}/v1" in started, started
        script = tmp_path / "client.py"
        script.write_text(python.replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
        client = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
        assert client.returncode == 0 and re.fullmatch(r"claw-v\d+\n", client.stdout), client.stdout + client.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)

    assert (tmp_path / "runs" / "serve" / "logs").is_dir()
    view = [str(BIN / "claw-view"), *lines[4][1:], "--port", str(port := free_port())]
    proc = subprocess.Popen(view, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline, runs = time.monotonic() + 120, None
        while runs is None and time.monotonic() < deadline:
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=5).json()
            except httpx.HTTPError:
                time.sleep(0.5)
        assert runs is not None and len(runs) == 2, runs
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def _until(proc: subprocess.Popen, text: str):
    """The lines ``proc`` prints, up to the one holding ``text``."""
    for line in proc.stdout:
        yield line
        if text in line:
            return
