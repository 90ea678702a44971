"""A real repository as a SWE-bench instance: pallets-eco/blinker at the parent of a real upstream fix
(``tests/fixtures/swe/SOURCES.md``). Its pytest config (``filterwarnings = error``, ``asyncio_mode = auto``) is one
that claw's own dev plugins break, so it resolves only in an instance virtualenv that sees nothing of claw's
environment, with the test dependencies the repository declares installed from the package index. A cached
virtualenv is keyed by the interpreter that built it: another checkout's gets its own, one whose interpreter is
gone is rebuilt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from claw_envs.swe.actions import tool_call_text
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.repos import RepoSource
from claw_envs.swe.venvs import declared_requirements
from claw_envs.swe.workspace import Workspaces
from tests.test_sandbox import needs_bwrap

FIXTURES = Path(__file__).parent / "fixtures" / "swe"
ID = "pallets-eco__blinker-148"
F2P = "tests/test_signals.py::test_int_sender"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("swe-real-cache")


@pytest.fixture(scope="module")
def env(cache):
    env = SWEEnv(tasks=str(FIXTURES / "blinker.jsonl"), repos=str(FIXTURES), cache_dir=str(cache), split="test")
    yield env
    env.close()


def bash(command: str) -> str:
    return tool_call_text("bash", {"command": command})


def test_claws_own_pytest_plugins_break_this_suite(tmp_path):
    """The premise: run by this interpreter, whose pytest auto-loads claw's dev plugins, the suite never starts."""
    pytest.importorskip("pytest_asyncio")
    checkout = tmp_path / "blinker"
    subprocess.run(["git", "clone", "-q", str(FIXTURES / "pallets-eco__blinker.bundle"), str(checkout)], check=True)
    env = {**os.environ, "PYTHONPATH": "src", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_signals.py"]
    done = subprocess.run(run, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "INTERNALERROR" in done.stdout + done.stderr, done.stdout[-2000:]


@needs_bwrap
def test_the_gold_patch_resolves_it_and_no_patch_does_not(env):
    env.reset(options={"task_id": ID})
    probe = "python -c 'import pytest, pytest_asyncio; print(pytest.__version__, pytest_asyncio.__version__)'"
    obs = env.step(bash(f"{probe}; python -c 'import hypothesis' 2>&1 | tail -1"))[0]
    assert "8.1.2 0.23.6" in obs and "No module named 'hypothesis'" in obs, obs  # its pins, none of claw's packages
    env.step(env.reference_action())
    _, reward, terminated, _, info = env.step(tool_call_text("submit"))
    report = info["report"]
    assert (reward, terminated, report["resolved"], report["test_exit_code"]) == (1.0, True, True, 0), report
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == [F2P]
    assert len(report["tests_status"]["PASS_TO_PASS"]["success"]) == 18

    env.reset(options={"task_id": ID})
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    report = info["report"]
    assert reward == -1.0 and report["suite_ran"] and report["test_exit_code"] == 1, report
    assert report["tests_status"]["FAIL_TO_PASS"]["failure"] == [F2P]
    assert len(report["tests_status"]["PASS_TO_PASS"]["success"]) == 18


@needs_bwrap
def test_a_venv_from_another_checkout_is_not_reused_and_a_broken_one_is_rebuilt(env, cache, tmp_path):
    row = dict(env.tasks.get(ID).data)
    source = RepoSource(str(FIXTURES), cache)
    mine = Workspaces(source).prepare(row)  # the one the episodes used
    record = mine.venv.parent / "env.json"
    built_at = record.stat().st_mtime_ns
    other = tmp_path / "checkout-b" / ".venv"  # another claw checkout's interpreter
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    theirs = Workspaces(source, python=str(other / "bin" / "python")).prepare(row)
    assert theirs.venv != mine.venv and f"{other}/bin/python -m venv" in (theirs.venv / "pyvenv.cfg").read_text()
    assert Workspaces(source).prepare(row).venv == mine.venv and record.stat().st_mtime_ns == built_at  # reused

    (mine.venv / "bin" / "python").unlink()  # its interpreter is gone
    again = Workspaces(source).prepare(row)
    assert again.venv != mine.venv and not mine.venv.exists()  # rebuilt aside, then swapped in; the old one removed
    done = subprocess.run([str(again.venv / "bin" / "python"), "-c", "import pytest_asyncio"], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_declared_test_dependencies_are_read_from_the_repository(tmp_path):
    def pyproject(text: str) -> Path:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        (folder / "pyproject.toml").write_text(text)
        return folder

    groups = pyproject(
        '[project]\nname = "Demo_Pkg"\ndependencies = ["attrs>=22"]\n'
        '[dependency-groups]\ntests = ["pytest>=8", {include-group = "extra"}]\nextra = ["freezegun"]\n'
    )
    assert declared_requirements(groups) == ["attrs>=22", "pytest>=8", "freezegun"]
    extras = pyproject(
        '[project]\nname = "demo-pkg"\n[project.optional-dependencies]\n'
        'test = ["demo_pkg[async]", "coverage"]\nasync = ["anyio"]\n'
    )
    assert declared_requirements(extras) == ["anyio", "coverage", "pytest"]  # its own extras expanded, pytest added
    files = pyproject('[project]\nname = "x"\n')
    (files / "requirements").mkdir()
    (files / "requirements" / "tests.in").write_text("pytest\n")
    (files / "requirements" / "tests.txt").write_text("pytest==8.1.2\n")
    assert declared_requirements(files) == ["pytest", "-r", str(files / "requirements" / "tests.txt")]
    assert declared_requirements(pyproject("")) == ["pytest"]
