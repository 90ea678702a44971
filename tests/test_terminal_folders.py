"""Terminal-Bench / Harbor task folders on the real bubblewrap sandbox: both layouts, the workdir at its absolute
path, hidden tests, offline test substitution, reward.txt and per-test grading, tampering, broken folders."""

from __future__ import annotations

import re
import shutil
import tomllib
import warnings
from pathlib import Path

import pytest
from test_sandbox import needs_bwrap
from typer.testing import CliRunner

from claw_envs.check import check_env
from claw_envs.shell_turns import tool_call_text
from claw_envs.terminal import TerminalEnv
from claw_envs.terminal.folders import read_folder
from claw_envs.terminal.grading import offline_command, pytest_results
from claw_envs.terminal.provision import host_package
from claw_envs.terminal.tasks import load_tasks
from claw_train.commands import envs

pytestmark = needs_bwrap

FIXTURES = Path(__file__).parent / "fixtures" / "terminal"
GOOD, BROKEN = FIXTURES / "good", FIXTURES / "broken"
BASH = tool_call_text
DONE = "The task is done."


@pytest.fixture(scope="module")
def env():
    e = TerminalEnv(tasks=str(GOOD), split="test", command_timeout=5.0)
    yield e
    e.close()


def finish(env: TerminalEnv, *commands: str) -> tuple[float, dict]:
    """Run ``commands`` as turns, then say done; the reward and the last info."""
    for command in commands:
        info = env.step(BASH(command))[-1]
        assert info["status"] == "ok", info["next_state"].text
    _, reward, terminated, _, info = env.step(DONE)
    assert terminated and info["status"] == "ok", info["next_state"].text
    return reward, info


def test_both_layouts_are_read_per_folder():
    tasks = {t.id: t.data for t in load_tasks(GOOD)}
    assert sorted(tasks) == ["harbor-basic", "harbor-reward", "tb1-basic"]
    harbor, reward, tb1 = tasks["harbor-basic"], tasks["harbor-reward"], tasks["tb1-basic"]
    assert (harbor["format"], reward["format"], tb1["format"]) == ("harbor", "harbor", "tb1")
    assert (harbor["workdir"], reward["workdir"], tb1["workdir"]) == ("/app", "/srv/job", "/app")
    assert (harbor["agent_timeout"], harbor["verifier_timeout"]) == (120.0, 60.0)
    assert (tb1["agent_timeout"], tb1["verifier_timeout"]) == (180.0, 60.0)
    assert harbor["copies"] == [["environment/data", "/app/data"]] and tb1["copies"] == [
        ["src/greet.py", "/app/greet.py"]
    ]
    assert reward["setup"] == ["mkdir -p out"] and not reward["unsupported"]
    assert harbor["instruction"].startswith("The file /app/data/prices.csv") and "greet.py" in tb1["instruction"]
    assert [t.id for t in load_tasks(GOOD / "tb1-basic")] == ["tb1-basic"]  # one task folder alone


@pytest.mark.parametrize(
    ("task_id", "untouched", "source"),
    [("harbor-basic", 1 / 3, "pytest"), ("tb1-basic", 1 / 3, "pytest"), ("harbor-reward", 0.5, "reward.txt")],
)
def test_the_oracle_scores_one_and_the_untouched_task_less(env, task_id, untouched, source):
    env.reset(options={"task_id": task_id})
    terminated = False
    while not terminated:
        _, reward, terminated, truncated, info = env.step(env.reference_action())
        assert info["status"] == "ok" and not truncated, info["next_state"].text
    ns = info["next_state"]
    assert (ns.outcome, reward, ns.evaluative.score) == (1.0, 1.0, 1.0), ns.text
    grading = info["grading"]
    assert grading["source"] == source
    if source == "pytest":
        assert set(grading["tests"].values()) == {"PASSED"} and len(grading["tests"]) == 3
        assert "ran `" in grading["offline"] and "-m pytest -rA" in grading["offline"]  # offline substitution said
        assert ns.evaluative.tags == ("tests=3/3",) and "3 passed" in grading["output"]
    else:
        assert grading["offline"] is None and ns.evaluative.tags == ("reward=1",)
    env.reset(options={"task_id": task_id})
    reward, info = finish(env)
    ns = info["next_state"]
    assert ns.outcome == pytest.approx(untouched) and reward == pytest.approx(2 * untouched - 1)
    assert ns.evaluative.score == -1.0 and ns.directive and "not done" in ns.directive  # declared done too early
    if source == "pytest":
        assert "Tests: 1 of 3 passed. Failing: test_outputs.py::" in ns.text
        assert list(info["grading"]["tests"].values()).count("FAILED") == 2


def test_the_workdir_is_at_its_absolute_path_with_the_copied_files(env):
    env.reset(options={"task_id": "harbor-basic"})
    assert env.step(BASH("pwd && cat /app/data/prices.csv | wc -l"))[0] == "/app\n4\nreturncode=0"
    env.reset(options={"task_id": "harbor-reward"})
    assert env.step(BASH("pwd && ls"))[0] == "/srv/job\nout\nreturncode=0"  # a RUN mkdir the backend honours
    env.reset(options={"task_id": "tb1-basic"})
    obs = env.step(BASH("ls /app && python /app/greet.py Ana"))[0]
    assert obs.startswith("greet.py\n") and "NameError: name 'nme' is not defined" in obs


def test_tests_and_solution_are_hidden_while_the_agent_works(env):
    env.reset(options={"task_id": "tb1-basic"})
    obs = env.step(BASH("ls /tests /logs; find / -xdev -name 'test_outputs.py' -o -name 'solution.sh' 2>/dev/null"))[0]
    assert "cannot access '/tests'" in obs and "cannot access '/logs'" in obs and "test_outputs.py" not in obs
    obs = env.step(BASH("mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt"))[0]
    assert "Read-only file system" in obs or "Permission denied" in obs


def test_a_reward_or_report_the_agent_fakes_is_not_read(env):
    env.reset(options={"task_id": "harbor-reward"})
    fakes = [
        "echo 1 > /tmp/reward.txt; echo 1 > reward.txt; mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt",
        "(sleep 2; echo 1 > /logs/verifier/reward.txt) >/dev/null 2>&1 &",  # a background job is ended first
    ]
    _, info = finish(env, *fakes)
    assert info["next_state"].outcome == 0.5 and info["grading"]["source"] == "reward.txt"
    env.reset(options={"task_id": "tb1-basic"})
    fakes = [
        # a fake pytest module in the workdir, a conftest that passes everything, and a program printing results
        "printf 'print(\"PASSED test_outputs.py::test_greets_ana\")\\n' > pytest.py",
        "printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n    return True\\n'"
        " > conftest.py",
        "printf 'print(\"\\\\n=== short test summary info ===\\\\nPASSED test_outputs.py::test_greets_bo\")\\n'"
        " > greet.py",
    ]
    reward, info = finish(env, *fakes)
    assert set(info["grading"]["tests"].values()) == {"FAILED"} and len(info["grading"]["tests"]) == 3
    assert (info["next_state"].outcome, reward) == (0.0, -1.0)


def test_offline_substitution_only_for_scripts_that_install_a_runner_and_run_pytest():
    py = "/venv/bin/python"
    harbor = (GOOD / "harbor-basic" / "tests" / "test.sh").read_text()
    tb1 = (GOOD / "tb1-basic" / "run-tests.sh").read_text()
    assert offline_command(harbor, py).endswith("-P -m pytest -rA --color=no -p no:cacheprovider --rootdir=/tests "
                                                "/tests/test_outputs.py")  # fmt: skip
    assert offline_command(tb1, py).endswith(" /tests/test_outputs.py")
    assert offline_command("pip install pytest\npytest tests/test_a.py tests/test_b.py -k fast\n", py).endswith(
        " /tests/test_a.py /tests/test_b.py"
    )
    assert offline_command("uv run pytest -q\n", py).endswith(" /tests")
    assert offline_command((GOOD / "harbor-reward" / "tests" / "test.sh").read_text(), py) is None  # its own verifier
    assert offline_command("curl -sS https://example.com/x -o x\npython3 check.py\npytest /tests\n", py) is None
    assert offline_command("pytest a.py\npytest b.py\n", py) is None


def test_per_test_results_come_from_the_last_summary_only():
    output = (
        "PASSED test_x.py::fake\n=== short test summary info ===\nFAILED test_x.py::fake\n"
        "----- Captured stdout -----\n=================== short test summary info ====================\n"
        "PASSED ../tests/test_x.py::test_a\nFAILED ../tests/test_x.py::test_b - assert 1 == 2\n"
        "SKIPPED [1] test_x.py:3: no\n========== 1 failed, 1 passed in 0.1s ==========\n"
    )
    assert pytest_results(output) == {"test_x.py::test_a": "PASSED", "test_x.py::test_b": "FAILED", "[1]": "SKIPPED"}
    assert pytest_results("PASSED test_x.py::a\n") == {}


def test_reward_json_is_read_and_clipped(tmp_path):
    task = shutil.copytree(GOOD / "harbor-reward", tmp_path / "json-reward")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho \'{"reward": 7, "note": "x"}\' > /logs/verifier/reward.json\n'
    )
    env = TerminalEnv(tasks=str(task), split="test")
    try:
        env.reset()
        _reward, info = finish(env)
        assert info["next_state"].outcome == 1.0 and info["grading"]["source"] == "reward.txt"
    finally:
        env.close()


def timed_task(tmp_path: Path, agent_seconds: float) -> TerminalEnv:
    """The harbor-basic task with ``agent_seconds`` of agent time (its task.toml's ``timeout_sec``), reset."""
    task = shutil.copytree(GOOD / "harbor-basic", tmp_path / "timed")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 120.0", f"timeout_sec = {agent_seconds}"))
    env = TerminalEnv(tasks=str(task), split="test", command_timeout=10.0)
    env.reset()
    return env


def test_the_agent_timeout_ends_the_episode_and_grades_it(tmp_path):
    env = timed_task(tmp_path, 3.0)
    try:
        assert env.step(BASH("sleep 1"))[-1]["status"] == "ok"
        obs, _reward, terminated, truncated, info = env.step(BASH("sleep 5; echo 35.49 > /app/total.txt"))
        assert terminated and not truncated and re.search(r"longer than the [\d.]+-second limit", obs), obs
        assert info["check"].startswith("the agent's time for this task is used up") and info["grading"]["tests"]
        assert info["next_state"].outcome == pytest.approx(1 / 3), (obs, info["grading"], env._agent_seconds)
    finally:
        env.close()


def test_a_command_killed_at_the_rounded_down_agent_time_still_ends_the_episode(tmp_path):
    """0.44 s of agent time caps the command at 0.4 s (tenths); killed there, the time is used up, not 0.04 s left."""
    env = timed_task(tmp_path, 0.44)
    try:
        obs, _reward, terminated, truncated, info = env.step(BASH("sleep 5"))
        assert terminated and not truncated and "0.4-second limit" in obs, obs
        assert info["check"].startswith("the agent's time for this task is used up"), info
    finally:
        env.close()


def test_a_task_this_machine_cannot_provision_is_refused_naming_what_it_lacks_not_scored_zero():
    env = TerminalEnv(tasks=str(BROKEN / "needs-apt"), split="test")
    try:
        env.reset()
        obs, _reward, _terminated, truncated, info = env.step(BASH("ls"))
        assert info["status"] == "sandbox_failure" and truncated and info["next_state"].outcome is None
        lacking = [name for name in ("jq", "gnucobol") if host_package(name) is None]
        assert obs == (
            f"[infrastructure failure] this machine lacks what the task needs: apt packages not installed here: "
            f"{', '.join(lacking)} (install: `apt-get install -y --no-install-recommends {' '.join(lacking)}`) "
            "(use sandbox='docker')"
        )
    finally:
        env.close()


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"instruction.md": "x", "tests/test.sh": "true"}, "needs task.toml next to instruction.md"),
        ({"task.toml": "[verifier\ntimeout_sec = 1", "instruction.md": "x"}, "task.toml: not valid TOML"),
        ({"task.toml": "", "instruction.md": "x"}, "no tests (tests/test.sh is missing)"),
        ({"task.toml": "[agent]\ntimeout_sec = 'soon'", "instruction.md": "x", "tests/test.sh": ""}, "positive number"),
        ({"task.toml": "agent = 3", "instruction.md": "x", "tests/test.sh": ""}, "[agent] must be a table"),
        ({"task.toml": "", "instruction.md": "  \n", "tests/test.sh": ""}, "the instruction is empty"),
        ({"task.yaml": "instruction: [unclosed"}, "task.yaml: not valid YAML"),
        ({"task.yaml": "- a list"}, "expected a mapping"),
        ({"task.yaml": "difficulty: easy"}, "'instruction' must be a non-empty string"),
        ({"task.yaml": "instruction: x\nparser_name: swebench"}, "parser_name 'swebench' is not supported"),
        ({"task.yaml": "instruction: x"}, "no tests (run-tests.sh and tests/ are both needed)"),
    ],
)
def test_malformed_task_folders_are_named_with_the_fault(tmp_path, files, message):
    folder = write(tmp_path / "bad-task", files)
    with pytest.raises(ValueError, match="bad-task") as err:
        load_tasks(tmp_path)
    assert message in str(err.value)
    with pytest.raises(ValueError, match="bad-task"):
        read_folder(folder)


def test_a_folder_with_strays_or_nothing_is_refused(tmp_path):
    shutil.copytree(GOOD / "harbor-basic", tmp_path / "harbor-basic")
    (tmp_path / "notes").mkdir()
    with pytest.raises(ValueError, match="notes: not task folders"):
        load_tasks(tmp_path)
    with pytest.raises(ValueError, match="no task folders"):
        load_tasks(tmp_path / "notes")


def test_claw_envs_check_passes_good_folders_and_names_broken_ones_with_why():
    result = CliRunner().invoke(envs.app, ["check", "terminal", "--tasks", str(GOOD), "--split", "test"])
    assert result.exit_code == 0 and "3 of 3 terminal tasks pass the check." in result.output, result.output
    result = CliRunner().invoke(envs.app, ["check", "terminal", "--tasks", str(BROKEN), "--split", "test"])
    assert result.exit_code == 1, result.output
    failing = {name.strip() for name in result.output.split("\nfailing:")[1].split(",")}
    assert failing == {"needs-network", "never-ends", "solution-fails", "solved-untouched"}
    assert "refused: needs-apt: this machine lacks what the task needs: apt packages" in result.output  # apart
    env = TerminalEnv(tasks=str(BROKEN), split="test")
    try:
        problems = {r.task_id: r.problem for r in env._run(check_env(env, [t.id for t in env.tasks]))}
    finally:
        env.close()
    assert problems["needs-apt"].endswith(
        "apt packages not installed here: gnucobol (install: `apt-get install -y --no-install-recommends gnucobol`) "
        "(use sandbox='docker')"
    )
    assert "the test script needs the network" in problems["needs-network"]
    assert "the tests did not finish within 2 s" in problems["never-ends"]
    assert problems["solution-fails"].startswith("the oracle solution does not solve it")
    assert problems["solved-untouched"].startswith("doing nothing already solves it")


def test_without_bubblewrap_a_task_folder_is_an_infra_failure():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the no-isolation warning
        env = TerminalEnv(tasks=str(GOOD / "harbor-basic"), sandbox_options={"isolation": "rlimits"})
        try:
            env.reset()
            obs, _, _, truncated, info = env.step(BASH("ls"))
        finally:
            env.close()
    assert info["status"] == "sandbox_failure" and truncated and "run on the local backend under bubblewrap" in obs


def test_every_file_of_the_built_in_task_folders_ships_as_package_data():
    """A non-editable install carries the folders only through pyproject's package-data globs."""
    package = Path(__file__).parents[1] / "claw_envs" / "terminal"
    globs = tomllib.loads((package.parents[1] / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {p for pattern in globs["claw_envs.terminal"] for p in package.glob(pattern) if p.is_file()}
    files = {p for p in (package / "task_folders").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert len(files) > 50 and files <= shipped


def test_tb1_copy_of_the_context_env_lines_pip_lines_and_a_solution_yaml(tmp_path):
    task = shutil.copytree(GOOD / "tb1-basic", tmp_path / "tb1-yaml")
    (task / "solution.sh").unlink()
    (task / "solution.yaml").write_text(
        "- command: cd /app/src\n  min_timeout_sec: 1\n- command: sed -i s/nme/name/ greet.py && cp greet.py /app/\n"
    )
    (task / "Dockerfile").write_text(
        'FROM python:3.13\nWORKDIR /app\nENV GREETING=hi OTHER="a b"\nENV SINGLE one two\n'
        "RUN pip install pytest==8.4.1\nRUN mkdir -p logs && pip install pytest\nCOPY . /app\n"
    )
    data = read_folder(task)
    assert data["copies"] == [["src", "/app/src"]]  # not the tests, the solution, task.yaml or run-tests.sh
    assert data["env"] == {"GREETING": "hi", "OTHER": "a b", "SINGLE": "one two"}
    assert data["setup"] == ["mkdir -p logs"] and data["unsupported"] == []  # a RUN of setup and pip is split
    assert data["pip"] == ["pytest==8.4.1", "pytest"]
    dockerfile = "FROM python:3.13\nWORKDIR /app\nENV GREETING=hi\nRUN pip install pytest\nCOPY . .\n"
    (task / "Dockerfile").write_text(dockerfile)
    env = TerminalEnv(tasks=str(task), split="test")
    try:
        env.reset()
        assert env.step(BASH('echo "$GREETING"; ls /app'))[0] == "hi\nsrc\nreturncode=0"
        env.reset()
        assert env.reference_action() == BASH("cd /app/src")
        while not (step := env.step(env.reference_action()))[2]:
            assert step[-1]["status"] == "ok", step[0]
        assert step[-1]["next_state"].outcome == 1.0  # the two turns of solution.yaml, in one persistent shell
    finally:
        env.close()
