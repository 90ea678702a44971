"""The SWE family through the CLIs: `claw-envs check swe`, `claw-eval --env swe --predictions`, `claw-train`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claw_envs.swe.tasks import builtin_instances
from tests.test_sandbox import needs_bwrap
from tests.test_swe_env import make_repo, widget_row

pytestmark = needs_bwrap  # /testbed is a bubblewrap mount
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cli_env() -> dict[str, str]:
    """The commands' environment: the instances' checkouts and venvs from the shared cache (~/.cache/claw/swe, built
    once under a lock by whichever process needs them first; test_swe_env checks building from scratch)."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def run(args: list[str], env: dict[str, str], timeout: float = 280) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.timeout(300)
def test_check_passes_for_every_built_in_instance(cli_env):
    proc = run([str(BIN / "claw-envs"), "check", "swe", "--jobs", "2"], cli_env)
    n = len(builtin_instances("train")) + len(builtin_instances("test"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{n} of {n} swe tasks pass the check" in proc.stdout


def test_check_names_a_broken_instance_and_why(cli_env, tmp_path):
    repos = tmp_path / "repos"
    _, base = make_repo(repos)
    broken = widget_row(base)
    broken["patch"] = broken["patch"].replace("w * h", "w * h + 0 * 1 + 1")  # the "gold" patch is wrong
    tasks = tmp_path / "rows.jsonl"
    tasks.write_text(json.dumps(broken) + "\n")
    args = [str(BIN / "claw-envs"), "check", "swe", "--tasks", str(tasks), "--repos", str(repos), "--split", "test"]
    proc = run(args, cli_env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 of 1 swe tasks pass the check" in proc.stdout
    assert "failing: acme__widgets-1" in proc.stdout and "does not solve it" in proc.stdout


@pytest.mark.timeout(300)
def test_eval_predictions_gold_all_resolved_and_empty_none(cli_env, tmp_path):
    test = builtin_instances("test")
    for name, patch, rate in (("gold", lambda t: t.data["patch"], 1.0), ("empty", lambda t: "", 0.0)):
        preds = tmp_path / f"{name}.jsonl"
        preds.write_text(
            "".join(
                json.dumps({"instance_id": t.id, "model_patch": patch(t), "model_name_or_path": name}) + "\n"
                for t in test
            )
        )
        out = tmp_path / name
        proc = run(
            [str(BIN / "claw-eval"), "--env", "swe", "--predictions", str(preds), "--output-dir", str(out)], cli_env
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["resolved_rate"] == rate and summary["resolved"] == rate * len(test)
        records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        assert {r["task_id"] for r in records} == {t.id for t in test}
        assert all(r["report"]["tests_status"]["FAIL_TO_PASS"] for r in records)
        assert "resolved" in proc.stdout


def test_eval_predictions_with_an_unknown_instance_is_named(cli_env, tmp_path):
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps([{"instance_id": "nope__nope-1", "model_patch": ""}]))
    proc = run([str(BIN / "claw-eval"), "--env", "swe", "--predictions", str(preds)], cli_env)
    assert proc.returncode == 2 and "no instance 'nope__nope-1'" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_claw_train_swe_end_to_end(cli_env, tmp_path):
    pytest.importorskip("trl")
    from claw_train.runlog.logs import Ledger

    out = tmp_path / "run"
    config = tmp_path / "cfg.yaml"
    config.write_text("max_new_tokens: 16\nmax_turns: 2\nsamples_per_step: 4\nreport_to: none\n")
    args = [str(BIN / "claw-train"), "--env", "swe", "--model", "tiny", "--updates", "2", "--output-dir", str(out)]
    # tiny runs no command here: the idle stop is off, this test is about the plumbing (the next test: the stop)
    proc = run([*args, "--config", str(config), "--no-display", "--max-idle-episodes", "0"], cli_env, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [e["update"] for e in Ledger(out / "ledger.jsonl").effective()] == [1, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 2
    assert json.loads((out / "run.json").read_text())["env"] == "claw/SWE-v0"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_whose_policy_never_runs_a_command_stops_and_says_so(cli_env, tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "run"
    config = tmp_path / "cfg.yaml"
    config.write_text("max_new_tokens: 16\nmax_turns: 1\nsamples_per_step: 4\nreport_to: none\n")
    args = [str(BIN / "claw-train"), "--env", "swe", "--model", "tiny", "--updates", "50", "--output-dir", str(out)]
    proc = run([*args, "--config", str(config), "--no-display", "--max-idle-episodes", "2"], cli_env, timeout=280)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "no action was carried out in any of the first 2 episodes" in " ".join(proc.stdout.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "no_action" and summary["updates"] < 50, summary
