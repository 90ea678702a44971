"""A practitioner's paths (issue #19): progress in a pipe, a broken env stopping the run with its error, hub ids
that cannot be fetched, a task file of your own, and the README's GPU command (its other commands: test_readme)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

import claw_envs
from claw_envs import FamilySpec, InfraFailure, StepStatus
from claw_envs.echo.env import EchoEnv
from claw_train.models.tiny import MARKER
from claw_train.options.resolve import build
from claw_train.options.tree import TrainArgs
from claw_train.pipeline import Pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class BrokenEnv(EchoEnv):
    """An env whose sandbox dies on every episode."""

    async def _begin(self, task):
        raise InfraFailure("the sandbox exploded", StepStatus.SANDBOX_FAILURE)


@pytest.fixture(scope="module")
def echo_model() -> str:
    from claw_train.models.tiny import bootstrap

    return str(bootstrap("echo", steps=2, progress=False))


def test_an_env_that_always_fails_stops_the_run_with_its_error(echo_model, tmp_path):
    spec = FamilySpec(name="brokenecho", env_id="claw/BrokenEcho-v0", entry_point="test_practitioner:BrokenEnv")
    claw_envs.register(spec)
    try:
        args = build(TrainArgs, command="train", env="brokenecho", model=echo_model, updates=1,
                     output_dir=tmp_path / "run", report_to="none")  # fmt: skip
        result = asyncio.run(asyncio.wait_for(Pipeline(args, model_path=echo_model).run(), 120))
    finally:
        claw_envs.registry.unregister(spec.env_id)
    assert result.status == "error" and result.exit_code == 1
    assert "the env failed on each of the first" in result.message and "the sandbox exploded" in result.message


def test_bootstrap_progress_shows_in_a_pipe(tmp_path):
    """A first run from an empty cache, output piped: the bootstrap says it started and then prints timed plain lines
    (no terminal control codes). Interrupted once such a line is out (the bootstrap would run on for a minute):
    Ctrl-C stops it and leaves no bootstrapped model in the cache (a later run builds it again)."""
    env = {**os.environ, "CLAW_TINY_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [str(BIN / "claw-train"), "--env", "echo", "--updates", "1", "--samples-per-step", "4",
         "--report-to", "none", "--output-dir", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    timed = re.compile(r"bootstrapping tiny on claw/Echo-v0: \d+/500 \(\d+%\), elapsed \d+ s, ETA \d+ s")
    out = ""
    try:
        for line in proc.stdout:
            out += line
            if timed.search(line):
                proc.send_signal(signal.SIGINT)
                break
        out += proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
    assert timed.search(out), out[-3000:]
    assert "bootstrapping tiny on claw/Echo-v0: started (500 to do)" in out
    assert "\x1b[" not in out  # no terminal control codes in a pipe
    assert proc.returncode != 0 and not list((tmp_path / "cache").glob(f"echo-*/{MARKER}")), out[-2000:]


@pytest.mark.parametrize("command", ["claw-train", "claw-eval", "claw-serve"])
def test_a_hub_id_that_cannot_be_fetched_says_what_to_do(tmp_path, command):
    """Offline, a hub id that is not in the local cache is said at once (before torch loads), with the fix."""
    env, out_dir = {**os.environ, "HF_HUB_OFFLINE": "1"}, tmp_path / "r"
    proc = subprocess.run(
        [str(BIN / command), "--env", "conversation", "--model", "Qwen/Qwen3-0.6B", "--output-dir", str(out_dir)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "cannot fetch 'Qwen/Qwen3-0.6B' from the Hugging Face hub (HF_HUB_OFFLINE is set)" in out
    assert "--model DIR" in out and "learning curve" not in out and not out_dir.exists()


def _readme_block(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(title) :]
    return re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the terminal sandbox needs bubblewrap")
def test_terminal_trains_on_a_task_file_of_your_own(tmp_path):
    from claw_train.models.tiny import bootstrap

    rows = [
        {"id": f"mine-{i}", "instruction": f"Create a file named out{i}.txt that contains the word ok{i}.",
         "check": f"grep -qx ok{i} out{i}.txt", "solution": [f"echo ok{i} > out{i}.txt"]}
        for i in range(6)
    ]  # fmt: skip
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = str(bootstrap("terminal", steps=2, progress=False))
    out = tmp_path / "run"
    # a 2-step bootstrap runs no command yet: the idle stop is off, this test is about reading the user's tasks
    proc = subprocess.run(
        [str(BIN / "claw-train"), "--env", "terminal", "--tasks", str(tmp_path / "tasks.jsonl"), "--model", model,
         "--updates", "1", "--samples-per-step", "4", "--report-to", "none", "--output-dir", str(out),
         "--max-idle-episodes", "0"],
        capture_output=True, text=True, timeout=580, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from claw_train.runlog.logs import read_logs

    tasks = {r["task"] for r in read_logs(out / "logs") if r["kind"] == "turn"}
    assert tasks and tasks <= {r["id"] for r in rows}  # rollouts drew from the given tasks only
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "instruction": "do it"}) + "\n")
    proc = subprocess.run(
        [str(BIN / "claw-train"), "--env", "terminal", "--tasks", str(bad), "--output-dir", str(tmp_path / "b")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "missing the required field 'check'" in proc.stdout + proc.stderr


def test_readme_gpu_quickstart_runs_as_written_against_local_servers(tmp_path):
    """The README's "GPUs and clusters" command as written, with the hub model replaced by a saved model folder and the
    servers by local ones on loopback: an SGLang-protocol stand-in backed by the real tiny model (SGLang itself
    needs CUDA; see test_policy_sglang) and a scripted OpenAI-style judge. Weights go to --publish-dir and the
    policy server is told to load each version from there."""
    from test_judges_backends import ScriptedOpenAIServer
    from test_policy_sglang import StandIn, serving

    from claw_train.models.tiny import bootstrap

    block = _readme_block("## GPUs and clusters")
    line = " ".join(part.split("#")[0].strip().rstrip("\\") for part in block.splitlines())
    command = line[line.index("claw-train") :].split()
    model = tmp_path / "Qwen3-4B"  # "a hub model": here the folder save_pretrained (or a hub download) leaves
    shutil.copytree(bootstrap("conversation", steps=2, progress=False), model)
    standin = StandIn(model)
    publish = tmp_path / "shared" / "claw-weights"
    try:
        with serving(standin) as url, ScriptedOpenAIServer() as judge:
            swaps = {
                "Qwen/Qwen3-4B": str(model),
                "sglang://127.0.0.1:30000": "sglang://" + url.removeprefix("http://"),
                "/shared/claw-weights": str(publish),
                "200": "1",
                "openai://127.0.0.1:30001": "openai://" + judge.url.removeprefix("http://"),
            }
            argv = [str(BIN / "claw-train"), *(swaps.get(a, a) for a in command[1:])]
            assert "--publish-dir" in argv and "--lora" in argv and str(model) in argv, argv
            argv += ["--samples-per-step", "4", "--max-new-tokens", "24", "--report-to", "none", "--eval-every", "0"]
            argv += ["--output-dir", str(tmp_path / "run")]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=580, cwd=tmp_path)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            assert judge.requests  # the judge scored the turns
    finally:
        standin.policy.close()
    loads = [body for route, body in standin.calls if route == "/update_weights_from_disk"]
    assert loads and all(Path(b["model_path"]).parent == publish for b in loads), loads
    assert (publish / "v1").is_dir() and standin.version == "1"
