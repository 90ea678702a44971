"""The GUI family through the CLIs: ``claw-envs check gui`` (every oracle solves its task on the real browser or
desktop, the no-op agent does not), and ``claw-train --env gui --updates 2`` on the tiny model (it acts on the
accessibility tree) followed by ``claw-eval --env gui`` on the run it wrote."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from claw_envs.gui.tasks import builtin_tasks

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


@pytest.mark.timeout(280)
def test_claw_envs_check_gui_passes_for_browser_and_desktop_tasks():
    proc = subprocess.run(
        [str(BIN / "claw-envs"), "check", "gui", "--split", "all", "--jobs", "2"],
        capture_output=True, text=True, timeout=270, env=ENV,
    )  # fmt: skip
    total = len(builtin_tasks("all"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{total} of {total} gui tasks pass the check" in proc.stdout
    for task_id in ("form-ann", "checkout-express", "drag-card", "desktop-notes", "desktop-prefs"):
        assert task_id in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(290)
def test_claw_train_gui_end_to_end_then_claw_eval(tmp_path):
    pytest.importorskip("trl")
    from claw_train.runlog.logs import Ledger

    out = tmp_path / "run"
    config = tmp_path / "cfg.yaml"
    config.write_text("max_new_tokens: 16\nmax_turns: 2\nsamples_per_step: 4\nreport_to: none\n")  # one group a step
    # tiny acts on no page (its replies parse as no action): the idle stop is off, this test is about the plumbing
    proc = subprocess.run(
        [str(BIN / "claw-train"), "--env", "gui", "--model", "tiny", "--updates", "2", "--output-dir", str(out),
         "--config", str(config), "--no-display", "--max-idle-episodes", "0"],
        capture_output=True, text=True, timeout=220, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [e["update"] for e in Ledger(out / "ledger.jsonl").effective()] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 2
    assert json.loads((out / "run.json").read_text())["env"] == "claw/GUI-v0"
    logged = [json.loads(line) for f in sorted((out / "logs").glob("v*.jsonl")) for line in f.read_text().splitlines()]
    turns = [r for r in logged if r.get("kind") == "turn"]
    assert turns and any(re.search(r'\[\d+\] \w+ "', r["next_state"]["text"]) for r in turns)  # it saw the tree

    evaluation = tmp_path / "eval"
    proc = subprocess.run(
        [str(BIN / "claw-eval"), "--env", "gui", "--model", str(out), "--eval-n", "2", "--max-turns", "2",
         "--max-new-tokens", "16", "--rollout-workers", "1", "--output-dir", str(evaluation)],
        capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((evaluation / "summary.json").read_text())
    assert result["tasks"] == 2 and result["samples"] == 2 and result["infra_failures"] == 0
