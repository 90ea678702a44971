"""Harbor task folders as public corpora write them: a ``python`` alias met by the task's virtualenv, files copied
outside the workdir shown read-only, a link to a program this machine lacks refused with its name, a workdir the
sandbox cannot hold refused, half tasks named and skipped, tasks with no solution checked without an oracle, and
real folders of the Harbor framework's own recipes (``tests/fixtures/harbor_wild``, see its SOURCES.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_sandbox import needs_bwrap
from typer.testing import CliRunner

from claw_envs.check import check_env
from claw_envs.shell_turns import tool_call_text
from claw_envs.terminal import TerminalEnv
from claw_envs.terminal.aliases import alias_folder, resolve
from claw_envs.terminal.folders import read_folder
from claw_envs.terminal.provision import plan
from claw_envs.terminal.tasks import load_tasks
from claw_train.commands import envs

WILD = Path(__file__).parent / "fixtures" / "harbor_wild"
OWN, COOKBOOK = WILD / "own", WILD / "harbor-cookbook"
SUM_A = (
    "python -c \"import csv; rows = csv.DictReader(open('/data/readings.csv')); "
    "print(sum(int(r['value']) for r in rows if r['sensor'] == 'a'))\" > total.txt"
)


def test_a_python_alias_is_met_by_the_virtualenv_and_listed_as_an_approximation():
    data = read_folder(OWN / "python-alias")
    link = "ln -s /usr/bin/python3 /usr/bin/python"
    assert data["aliases"] == [["/usr/bin/python", "/usr/bin/python3", link]] and not data["unsupported"]
    assert data["shown"] == [["environment/data/readings.csv", "/data/readings.csv"]]  # its `mkdir -p /data` is met
    p = plan(data)
    assert p.problem is None and p.links == ()
    assert f"`{link}`: `python` is the task virtualenv's python on PATH (no link in /usr/bin)" in p.approximations
    assert "COPY environment/data/readings.csv /data/readings.csv: shown read-only there" in p.approximations


def test_a_link_to_a_program_this_machine_lacks_refuses_the_task_naming_it():
    p = plan(read_folder(OWN / "alias-missing"))
    assert p.problem is not None
    assert "`ln -s /opt/gradle-8.5/bin/gradle /usr/bin/gradle` links to /opt/gradle-8.5/bin/gradle" in p.problem
    assert "which this machine lacks" in p.problem


def test_a_link_to_a_program_this_machine_has_goes_in_a_bin_folder_of_the_sandboxs_own(tmp_path):
    found = resolve([["/usr/local/bin/shell", "/bin/sh", "ln -s /bin/sh /usr/local/bin/shell"]])
    assert found.links == (("shell", "/bin/sh"),) and not found.missing
    assert "runs /bin/sh from the sandbox's own bin folder on PATH, not /usr/local/bin/shell" in found.notes[0]
    folder = alias_folder(found.links, tmp_path)
    assert (folder / "shell").resolve() == Path("/bin/sh").resolve() and alias_folder(found.links, tmp_path) == folder


def test_a_workdir_the_sandbox_keeps_for_itself_is_refused_naming_it(tmp_path):
    task = tmp_path / "home-user"
    shutil.copytree(OWN / "python-alias", task)
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("WORKDIR /workspace", "WORKDIR /home/user"))
    problem = plan(read_folder(task)).problem or ""
    assert "WORKDIR /home/user: the local sandbox cannot hold a workdir there" in problem


def test_half_tasks_are_named_and_skipped_never_read_as_tasks(tmp_path):
    shutil.copytree(OWN / "python-alias", tmp_path / "python-alias")
    shutil.copytree(COOKBOOK / "multi-step", tmp_path / "multi-step")  # Harbor's multi-step form: no top instruction
    (tmp_path / "no-tests").mkdir()
    (tmp_path / "no-tests" / "task.toml").write_text("")
    (tmp_path / "no-tests" / "instruction.md").write_text("Do it.\n")
    with pytest.warns(UserWarning, match="skipped 2 folder"):
        tasks = load_tasks(tmp_path)
    assert [t.id for t in tasks] == ["python-alias"]
    assert tasks.skipped == [
        ("multi-step", "a Harbor task folder needs instruction.md next to task.toml"),
        ("no-tests", "no tests (tests/test.sh is missing)"),
    ]
    with pytest.raises(ValueError, match=r"no-tests: no tests \(tests/test.sh is missing\)"):
        load_tasks(tmp_path / "no-tests")  # alone, it is an error naming the folder
    shutil.rmtree(tmp_path / "python-alias")
    with pytest.raises(ValueError, match=r"no whole task in it: multi-step \(a Harbor task folder needs instruction"):
        load_tasks(tmp_path)  # nothing but half tasks: an error naming them


@needs_bwrap
def test_in_the_sandbox_python_runs_and_the_copied_data_is_read_only_at_its_path():
    env = TerminalEnv(tasks=str(OWN / "python-alias"), split="test")
    try:
        _, info = env.reset(options={"task_id": "python-alias"})
        assert "refused" not in info and len(info["approximations"]) == 2
        assert env.step(tool_call_text(SUM_A))[-1]["status"] == "ok"
        write = env.step(tool_call_text("echo 0 > /data/readings.csv"))[-1]["next_state"]
        assert write.evaluative.score == -1.0 and "Read-only file system" in write.text
        _, reward, terminated, _, info = env.step("The task is done.")
    finally:
        env.close()
    assert terminated and reward == 1.0 and info["next_state"].outcome == 1.0  # the tests ran `python` too


@needs_bwrap
def test_a_task_with_no_solution_is_checked_by_doing_nothing_and_counted_loadable(tmp_path):
    shutil.copytree(OWN / "python-alias", tmp_path / "python-alias")
    result = CliRunner().invoke(envs.app, ["check", "terminal", "--tasks", str(tmp_path), "--split", "test"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("python-alias\t"))
    assert row.split("\t")[1:3] == ["—", "0.0"]  # no oracle outcome; doing nothing scored 0
    assert "ok, no solution to play: only doing nothing was checked; approximate environment: `ln -s" in row
    assert "runs here: 0; runs approximately: 0; no oracle (no solution to play; loadable): 1; refused: 0" in (
        result.output
    )


@needs_bwrap
def test_real_harbor_recipes_run_run_approximately_or_are_refused_naming_what_they_lack():
    with pytest.warns(UserWarning, match="multi-step"):
        env = TerminalEnv(tasks=str(COOKBOOK), split="test")
    try:
        results = {r.task_id: r for r in env._run(check_env(env, [t.id for t in env.tasks]))}
    finally:
        env.close()
    assert {k: r.verdict for k, r in results.items()} == {
        "dns-blacklisting": "refused",
        "simple-task": "runs",
        "skills": "approximate",
    }, {k: r.problem for k, r in results.items()}
    assert "COPY environment/skills /skills: shown read-only there" in results["skills"].oracle.approximations
    refused = results["dns-blacklisting"].refused or ""
    assert "/etc/blacklist-patterns.txt" in refused and results["dns-blacklisting"].null is None


@needs_bwrap
def test_a_link_to_a_program_this_machine_has_runs_by_its_name_in_the_sandbox(tmp_path):
    task = tmp_path / "shell-link"
    shutil.copytree(OWN / "python-alias", task)
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN ln -s /bin/sh /usr/local/bin/claw-test-shell\n")
    env = TerminalEnv(tasks=str(task), split="test")
    try:
        _, info = env.reset(options={"task_id": "shell-link"})
        assert info["environment"]["links"] == {"claw-test-shell": "/bin/sh"}
        ns = env.step(tool_call_text("claw-test-shell -c 'echo linked'"))[-1]["next_state"]
    finally:
        env.close()
    assert ns.evaluative.score > 0 and "linked" in ns.text, ns.text
