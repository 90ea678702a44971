"""``kill -9`` at three points of a claw-train run, then ``--resume``: no sample is trained twice, the ledger's
effective updates are exactly 1..N, and the logs hold every turn the ledger trained.

The kill comes from inside the process at a chosen point (a ``sitecustomize`` module on ``PYTHONPATH`` wraps one
method once it is imported), so each point is hit exactly, not by racing a timer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

from claw_train.runlog.logs import Ledger, read_logs  # noqa: E402

CLAW_TRAIN = str(Path(sys.executable).parent / "claw-train")
UPDATES = 4

KILLER = """
import importlib.abc, importlib.util, os, signal, sys

MODULE, CLASS, METHOD, CALL = {module!r}, {cls!r}, {method!r}, {call}


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            owner = getattr(module, CLASS)
            original = getattr(owner, METHOD)
            calls = [0]

            def wrapped(*args, **kwargs):
                calls[0] += 1
                if calls[0] == CALL:
                    if METHOD == "_save_rng_state":  # mid-checkpoint: weights and optimizer written, state not
                        os.kill(os.getpid(), signal.SIGKILL)
                    result = original(*args, **kwargs)  # mid-update: samples taken, the step not made
                    os.kill(os.getpid(), signal.SIGKILL)
                    return result
                return original(*args, **kwargs)

            setattr(owner, METHOD, wrapped)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
"""

POINTS = {
    # the first update is ledgered, no checkpoint exists yet (checkpoint_every is large)
    "before_first_checkpoint": None,
    # the third batch was pulled from the queue, its optimizer step never happens
    "mid_update": ("claw_train.training.trainer", "ClawTrainer", "_generate_and_score_completions", 3),
    # checkpoint-2 has weights and optimizer but no trainer_state.json
    "during_checkpoint_write": ("transformers.trainer", "Trainer", "_save_rng_state", 2),
}


@pytest.fixture(scope="module")
def model() -> str:
    from claw_train.models.tiny import bootstrap

    return str(bootstrap("conversation", steps=2, progress=False))


@pytest.mark.parametrize("point", list(POINTS))
def test_kill_minus_nine_then_resume(model, tmp_path, point):
    out = tmp_path / "run"
    config = tmp_path / "fast.yaml"
    config.write_text("max_new_tokens: 16\nreport_to: none\nsamples_per_step: 4\n")
    every = "100" if point == "before_first_checkpoint" else "1"
    args = [CLAW_TRAIN, "--env", "conversation", "--model", model, "--updates", str(UPDATES), "--output-dir",
            str(out), "--eval-every", "0", "--checkpoint-every", every, "--no-display",
            "--config", str(config)]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    killer = POINTS[point]
    if killer is not None:
        hooks = tmp_path / "hooks"
        hooks.mkdir()
        module, cls, method, call = killer
        (hooks / "sitecustomize.py").write_text(KILLER.format(module=module, cls=cls, method=method, call=call))
        first = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**env, "PYTHONPATH": str(hooks)})
        assert first.returncode == -9, first.stdout[-2000:] + first.stderr[-2000:]
    else:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ledger = Ledger(out / "ledger.jsonl")
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not ledger.records():
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed: " + proc.stdout.read()[-2000:]
        proc.kill()
        proc.wait(30)
        assert not list((out / "checkpoints").glob("checkpoint-*/trainer_state.json"))
    killed = Ledger(out / "ledger.jsonl").records()
    assert killed, "the killed run ledgered no update"
    before = {p.name: p.read_text() for p in (out / "logs").glob("v*.jsonl")}

    again = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    records = Ledger(out / "ledger.jsonl").records()
    resumed = records[len(killed)]
    assert resumed["kind"] == "resume"
    expected_from = {"before_first_checkpoint": 0, "mid_update": 2, "during_checkpoint_write": 1}[point]
    assert resumed["from_update"] == expected_from
    effective = Ledger(out / "ledger.jsonl").effective()
    assert [e["update"] for e in effective] == list(range(1, UPDATES + 1))
    every_id = [s for r in records if r["kind"] == "update" for s in r["samples"]]
    assert len(every_id) == len(set(every_id)), "a sample was trained twice"
    trained = {s for e in effective for s in e["samples"]}
    assert len(trained) == UPDATES * 4
    logged = {r["sample_id"] for r in read_logs(out / "logs") if r["kind"] == "turn" and r["sample_id"]}
    assert {s for r in killed if r["kind"] == "update" for s in r["samples"]} <= logged  # nothing lost at the kill
    assert trained <= logged, "the ledger names a sample the logs do not hold"
    for name, text in before.items():  # what the killed run wrote is still there, unchanged
        assert (out / "logs" / name).read_text().startswith(text)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == UPDATES
