"""A real repository whose package imports a file its install generates: tox-dev/platformdirs (hatch-vcs writes
``src/platformdirs/version.py``, git-ignored, which ``platformdirs/__init__.py`` imports) at the parent of a real
upstream fix (``tests/fixtures/swe_generated/SOURCES.md``). Without that file in ``/testbed`` pytest stops at
collection (exit 2, ``No module named 'platformdirs.version'``) and every test counts as failed; with it the gold
patch resolves the instance and an empty patch does not, in an episode and through ``claw-eval --predictions``.

The instance's virtualenvs are built as test_swe_real builds blinker's, by pip from the package index it is
configured with: the row's ``install`` (pinned releases that this machine class's local index also holds) with the
build backend (hatchling, hatch-vcs) through pip's build isolation; for the row without ``install``, the
repository's declared ``test`` group (covdefaults and diff-cover come from PyPI). Grading never reaches a network.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claw_envs.sandbox import make_sandbox
from claw_envs.swe.actions import tool_call_text
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.grading import TEST_PATCH_FILE
from claw_envs.swe.repos import RepoSource
from claw_envs.swe.workspace import Workspaces
from tests.test_sandbox import needs_bwrap

pytestmark = needs_bwrap  # /testbed is a bubblewrap mount
FIXTURES = Path(__file__).parent / "fixtures" / "swe_generated"
ROWS = FIXTURES / "platformdirs.jsonl"
ID = "tox-dev__platformdirs-520"
F2P, P2P = 7, 335


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("swe-generated-cache")


@pytest.fixture(scope="module")
def row() -> dict:
    return json.loads(ROWS.read_text())


def bash(command: str) -> str:
    return tool_call_text("bash", {"command": command})


def test_without_the_generated_file_the_suite_cannot_import_the_package(cache, row):
    """The premise: the checkout alone (what /testbed held before) fails at collection, whatever the patch."""
    prepared = Workspaces(RepoSource(str(FIXTURES), cache)).prepare(row)
    assert prepared.generated_files == ("src/platformdirs/version.py",)
    bare = dataclasses.replace(prepared, generated=None, generated_files=())
    with make_sandbox("local", **bare.sandbox_options("local", row)) as box:
        env = bare.command_env("local")
        assert box.run(bare.checkout(row["base_commit"]), timeout=120, env=env).ok
        box.write_file(TEST_PATCH_FILE, row["test_patch"])
        done = box.run(f"cd /testbed && git apply {TEST_PATCH_FILE} && {row['test_cmd']}", timeout=120, env=env)
    assert done.returncode == 2 and "No module named 'platformdirs.version'" in done.stdout, done.stdout[-2000:]


def test_an_episode_with_the_gold_patch_resolves_it_and_one_with_none_does_not(cache):
    env = SWEEnv(tasks=str(ROWS), repos=str(FIXTURES), cache_dir=str(cache), split="test", test_timeout=240)
    env.reset(options={"task_id": ID})
    probe = "git status --short; git log --format=%h; python -c 'import platformdirs; print(platformdirs.__version__)'"
    obs = env.step(bash(probe))[0]
    assert obs.startswith("a9f2ba9\n4.11.1\n"), obs  # git shows no stray file; the tagged release's version
    env.step(env.reference_action())
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    report = info["report"]
    assert (reward, report["resolved"], report["test_exit_code"]) == (1.0, True, 0), report
    assert len(report["tests_status"]["FAIL_TO_PASS"]["success"]) == F2P
    assert len(report["tests_status"]["PASS_TO_PASS"]["success"]) == P2P
    assert "version.py" not in info["patch"]

    env.reset(options={"task_id": ID})
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    report = info["report"]
    assert reward == -1.0 and report["suite_ran"] and report["test_exit_code"] == 1, report
    assert len(report["tests_status"]["FAIL_TO_PASS"]["failure"]) == F2P
    assert len(report["tests_status"]["PASS_TO_PASS"]["success"]) == P2P
    env.close()


@pytest.mark.timeout(400)
def test_claw_eval_predictions_resolve_the_gold_patch_and_not_an_empty_one(cache, row, tmp_path):
    preds = tmp_path / "preds.jsonl"
    out = tmp_path / "out"
    lines = [{"instance_id": ID, "model_patch": patch, "model_name_or_path": "p"} for patch in (row["patch"], "")]
    for n, line in enumerate(lines):
        preds.write_text(json.dumps(line) + "\n")
        args = ["--env", "swe", "--tasks", str(ROWS), "--eval-split", "test", "--repos", str(FIXTURES)]
        env = {**os.environ, "CLAW_SWE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
        claw_eval = [str(Path(sys.executable).parent / "claw-eval"), *args, "--predictions", str(preds)]
        done = subprocess.run(
            [*claw_eval, "--output-dir", str(out / str(n))], capture_output=True, text=True, timeout=380, env=env
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        record = json.loads((out / str(n) / "episodes.jsonl").read_text())
        tests = record["report"]["tests_status"]
        assert record["resolved"] is (n == 0) and record["report"]["test_exit_code"] == n, record["report"]
        assert len(tests["PASS_TO_PASS"]["success"]) == P2P
        assert len(tests["FAIL_TO_PASS"]["success" if n == 0 else "failure"]) == F2P


def test_a_row_without_install_gets_the_repositorys_own_install_for_its_version_file(cache, row, tmp_path):
    """No ``install``: the declared test dependencies, then ``pip install --no-deps -e .`` because pyproject.toml
    declares hatch-vcs's version file; the gold patch resolves the instance."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({k: v for k, v in row.items() if k != "install"}) + "\n")
    env = SWEEnv(tasks=str(rows), repos=str(FIXTURES), cache_dir=str(cache), split="test", test_timeout=240)
    env.reset(options={"task_id": ID})
    obs = env.step(bash("python -c 'import platformdirs, covdefaults; print(platformdirs.__version__)'"))[0]
    assert obs.startswith("4.11.1\n"), obs  # covdefaults: from the repository's own `test` dependency group
    assert env.prepared.generated_files == ("src/platformdirs/version.py",)
    env.step(env.reference_action())
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    assert reward == 1.0 and info["report"]["test_exit_code"] == 0, info["report"]
    env.close()
