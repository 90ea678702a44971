"""claw/SWE-v0: real episodes on the built-in repos and on repos of your own, and every bad input as a clear
next state or a typed infrastructure failure, with the host and the caches untouched."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import gymnasium as gym
import pytest
from test_cache import nothing_built

import claw_envs
from claw_envs.swe.actions import SUBMIT_MARKER, read_turn, tool_call_text
from claw_envs.swe.demos import STYLES, script
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.repos import FIXED_IDENTITY, RepoSource, dir_name
from claw_envs.swe.tasks import builtin_instances, load_instances
from claw_envs.swe.workspace import Prepared
from tests.test_sandbox import needs_bwrap

TASK = "claw-examples__ledger-9"
pytestmark = needs_bwrap  # /testbed is a bubblewrap mount


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("swe-cache"))


@pytest.fixture
def env(cache):
    env = SWEEnv(split="test", cache_dir=cache, command_timeout=10.0, test_timeout=60.0)
    env.reset(options={"task_id": TASK})
    yield env
    env.close()


def bash(command: str) -> str:
    return tool_call_text("bash", {"command": command})


def test_registered_with_its_spec_and_made_through_gymnasium():
    assert "claw/SWE-v0" in claw_envs.env_ids()
    spec = claw_envs.family_spec("swe")
    assert spec.judge.prm == "prm_swe" and "repos" in spec.env_options
    env = gym.make("claw/SWE-v0", split="test").unwrapped
    obs, info = env.reset(options={"task_id": TASK})
    assert "format_cents(-5)" in obs and info["task_id"] == TASK
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "submit"]
    env.close()


def test_built_in_instances_are_swe_bench_rows_on_real_commits(cache):
    train, test = builtin_instances("train"), builtin_instances("test")
    assert len(train) + len(test) >= 8 and not {t.id for t in train} & {t.id for t in test}
    repos = {t.data["repo"] for t in [*train, *test]}
    assert len(repos) >= 3
    source = RepoSource(cache_dir=cache)
    for task in [*train, *test]:
        mirror = source.mirror(task.data["repo"], task.data["base_commit"])
        kind = subprocess.run(["git", "cat-file", "-t", task.data["base_commit"]], cwd=mirror, capture_output=True)
        assert kind.stdout.strip() == b"commit"
        assert task.data["FAIL_TO_PASS"] and task.data["PASS_TO_PASS"] and task.data["test_cmd"]


def test_the_repo_is_at_testbed_at_base_commit_with_no_future(env):
    base = env.instance["base_commit"]
    obs, *_, info = env.step(bash("pwd && git rev-parse HEAD && git status --short && git log --all --oneline | wc -l"))
    assert info["status"] == "ok"
    lines = obs.splitlines()
    assert lines[0] == "/testbed" and lines[1] == base and lines[2] == "1"


def test_a_command_turn_scores_and_stores_the_tool_call(env):
    _, reward, terminated, _, info = env.step(bash("grep -n 'def format_cents' ledger/money.py"))
    ns = info["next_state"]
    assert ns.role == "tool" and ns.evaluative.score == 0.5 and "returncode=0" in ns.text
    assert reward == 0 and not terminated and ns.outcome is None
    assert info["messages"][-2]["tool_calls"][0]["function"]["name"] == "bash"
    assert info["messages"][-1]["role"] == "tool"
    assert set(ns.judge_inputs) == {"task", "history", "action", "result"}


def test_fixing_the_bug_and_submitting_resolves_it(env):
    env.step(env.reference_action())
    _, reward, terminated, _, info = env.step(tool_call_text("submit"))
    ns = info["next_state"]
    assert terminated and reward == 1.0 and ns.outcome == 1.0 and ns.evaluative.score == 1.0
    assert "tests=4/4" in ns.evaluative.tags
    assert info["report"]["resolved"] and "ledger/money.py" in info["patch"]
    assert "tests/" not in info["patch"]


def test_the_mini_swe_agent_submit_convention(env):
    env.step(env.reference_action())
    _, reward, terminated, _, _ = env.step(f"```bash\necho {SUBMIT_MARKER} && git diff\n```")
    assert terminated and reward == 1.0


def test_submitting_nothing_is_unresolved_with_a_directive(env):
    _, reward, terminated, _, info = env.step(tool_call_text("submit"))
    ns = info["next_state"]
    assert terminated and reward == -1.0 and ns.outcome == -1.0 and ns.evaluative.score == -1.0
    assert "not resolved" in ns.text and ns.directive.startswith("The issue is not fixed")
    assert info["report"]["tests_status"]["FAIL_TO_PASS"]["failure"]


def test_the_turn_limit_grades_the_workspace(cache):
    env = SWEEnv(split="test", cache_dir=cache, max_turns=1)
    env.reset(options={"task_id": TASK})
    _, reward, terminated, truncated, info = env.step(env.reference_action())
    assert truncated and not terminated and reward == 1.0 and info["next_state"].outcome == 1.0
    assert info["next_state"].evaluative.score == 0.5  # the command's own score; the outcome is separate
    env.close()


@pytest.mark.parametrize(
    ("action", "tag"),
    [
        ("I think the bug is in money.py.", "no_command"),
        ("", "empty_action"),
        (bash("ls") + tool_call_text("submit"), "several_commands"),
        ('<tool_call>{"name": "bash", "arguments": {}}</tool_call>', "bad_arguments"),
    ],
)
def test_turns_that_cannot_be_acted_on_are_minus_one_with_a_directive(env, action, tag):
    _, _, terminated, _, info = env.step(action)
    ns = info["next_state"]
    assert not terminated and ns.evaluative.score == -1.0 and ns.directive
    assert ns.evaluative.tags[0] == tag, ns


def test_a_failed_command_repeated_is_flagged(env):
    first = env.step(bash("cat ledger/nope.py"))[-1]["next_state"]
    again = env.step(bash("cat ledger/nope.py"))[-1]["next_state"]
    assert first.evaluative.score == -1 and "repeated_failure" not in first.evaluative.tags
    assert "No such file" in first.directive
    assert "repeated_failure" in again.evaluative.tags and "same command" in again.directive


def test_editing_a_test_file_is_flagged_and_left_out_of_the_patch(env):
    ns = env.step(bash("echo 'def test_x(): pass' >> tests/test_money.py"))[-1]["next_state"]
    assert ns.evaluative.score == -1 and "test_file_edit" in ns.evaluative.tags
    assert "tests/test_money.py" in ns.directive
    env.step(env.reference_action())
    info = env.step(tool_call_text("submit"))[-1]
    assert info["report"]["resolved"] and "tests/test_money.py" not in info["patch"]


def test_a_syntax_error_left_in_an_edit_is_flagged(env):
    ns = env.step(bash("printf 'def broken(:\\n' >> ledger/stats.py"))[-1]["next_state"]
    assert ns.evaluative.score == -1 and "syntax_error" in ns.evaluative.tags
    assert "ledger/stats.py" in ns.text and "SyntaxError" in ns.directive


def test_deleting_git_and_the_repo_is_the_agents_loss_and_the_cache_survives(env, cache):
    ns = env.step(bash("rm -rf .git"))[-1]["next_state"]
    assert ns.evaluative.score == -1 and "git_deleted" in ns.evaluative.tags
    env.step(bash("rm -rf /testbed/* /testbed/.gitignore"))
    info = env.step(tool_call_text("submit"))[-1]
    assert info["status"] == "ok" and info["next_state"].outcome == -1.0
    assert "deleted file mode" in info["patch"]
    env.reset(options={"task_id": TASK})  # the next episode starts from an intact mirror
    env.step(env.reference_action())
    assert env.step(tool_call_text("submit"))[-1]["next_state"].outcome == 1.0


def test_the_mirror_is_read_only_and_the_host_untouched(env, tmp_path):
    mirror = env.prepared.mirror if env.prepared else None
    obs = env.step(bash(f"echo evil > /claw/repo/HEAD; touch {tmp_path}/escaped; echo done"))[0]
    assert "Read-only file system" in obs or "Permission denied" in obs
    assert not (tmp_path / "escaped").exists()
    mirror = env.prepared.mirror
    assert (mirror / "HEAD").read_text().startswith("ref:")


def test_a_command_that_never_ends_and_huge_binary_output(env):
    ns = env.step(bash("sleep 60"))[-1]["next_state"]
    assert "timeout" in ns.evaluative.tags and ns.evaluative.score == -1
    obs, *_, info = env.step(bash("head -c 3000000 /dev/urandom"))
    assert info["status"] == "ok" and len(obs) < 20000 and "too long" in obs


def test_docker_images_follow_swebench_naming_unless_the_row_names_one():
    prepared = Prepared(mirror=Path("/unused"))
    row = {"instance_id": "django__django-11099"}
    assert prepared.sandbox_options("docker", row)["image"] == "sweb.eval.x86_64.django_1776_django-11099:latest"
    assert prepared.sandbox_options("docker", row | {"image": "mine:1"}) == {"image": "mine:1", "workspace": "/testbed"}


def test_the_docker_backend_without_an_engine_is_a_sandbox_failure(cache):
    env = SWEEnv(split="test", cache_dir=cache, sandbox="docker")
    env.reset(options={"task_id": TASK})
    _, reward, _, truncated, info = env.step(bash("ls"))
    assert info["status"] == "sandbox_failure" and truncated and reward == 0
    assert "docker" in info["next_state"].text.lower()
    env.close()


def test_demonstrations_are_scripted_fixes_recorded_for_real(cache):
    env = SWEEnv(cache_dir=cache, command_timeout=10.0, test_timeout=60.0)
    rows = env.demonstrations(8, seed=0)  # the first instance in both styles: recording stops there
    env.close()
    assert len({json.dumps(r, sort_keys=True) for r in rows}) == 8  # 2 styles x 4 turns, each once
    turns = [read_turn(r["completion"]) for r in rows]
    assert sum(t.kind == "submit" for t in turns) == 1 and sum(t.kind == "command" for t in turns) == 7
    assert sum(r["completion"].startswith("```bash") for r in rows) == 4  # one run as fenced blocks
    assert {r["messages"][1]["content"] for r in rows} == {rows[0]["messages"][1]["content"]}  # one instance
    for row, turn in zip(rows, turns, strict=True):
        assert row["messages"][1]["content"].startswith("Fix this issue in claw-examples/")
        assert [t["function"]["name"] for t in row["tools"]] == ["bash", "submit"]
        if turn.kind == "submit" or SUBMIT_MARKER in turn.command:  # after the real test run, which passes
            assert re.search(r"\d+ passed", str(row["messages"][-1]["content"]))
        if turn.command.startswith("git apply"):  # after looking at the code the patch changes, for real
            context = next(line[1:] for line in turn.command.splitlines()[5:] if line.startswith(" "))
            assert context.strip() in str(row["messages"][-1]["content"])


def test_every_training_instance_has_a_whole_script_in_both_styles():
    """What a long warm start records beyond the first instance (the recording itself is tested above): the patch
    goes through the here-document whole, and the look covers the lines it changes."""
    for task in builtin_instances("train"):
        patch = task.data["patch"]
        assert patch.endswith("\n") and "\nEOF\n" not in patch, task.id  # the here-document ends where it should
        for style in STYLES:
            turns = [read_turn(t) for t in script(task.data, style)]
            assert [t.kind for t in turns] == ["command"] * (3 + (style == "fenced")) + ["submit"] * (style == "tool")
            assert turns[0].command.startswith("sed -n ") and turns[0].command.split()[-1] in patch
            assert turns[1].command == f"git apply <<'EOF'\n{patch}EOF"


def test_turn_reading():
    assert read_turn(tool_call_text("submit")).kind == "submit"
    assert read_turn("```bash\nls\n```").command == "ls"
    assert read_turn("done, I think").kind == "problem"
    empty = read_turn("  ")
    assert empty.tag == "empty_action" and "submit" in empty.problem and "done" not in empty.problem


# -- repositories and instances of your own --------------------------------------------------------


def make_repo(root: Path, repo: str = "acme/widgets", dependency: bool = False) -> tuple[Path, str]:
    """A clone named owner__name with a bug in widgets/size.py and a pytest suite (``dependency``: the code imports
    ``helperdep``, which only the install provides); returns (path, base commit)."""
    path = root / dir_name(repo)
    (path / "widgets").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "widgets" / "__init__.py").write_text("")
    header = "import helperdep\n" if dependency else "import os\n"
    (path / "widgets" / "size.py").write_text(header + "\n\ndef area(w, h):\n    return w + h\n")
    (path / "tests" / "test_size.py").write_text(
        "from widgets.size import area\n\n\ndef test_square():\n    assert area(2, 2) == 4\n"
    )
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "widgets"]):
        subprocess.run(["git", *args], cwd=path, check=True, env={**FIXED_IDENTITY, "PATH": "/usr/bin:/bin"})
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()
    return path, base


def widget_row(base: str, **extra) -> dict:
    return {
        "instance_id": "acme__widgets-1",
        "repo": "acme/widgets",
        "base_commit": base,
        "problem_statement": "area(3, 4) returns 7 instead of 12.",
        "patch": "diff --git a/widgets/size.py b/widgets/size.py\n--- a/widgets/size.py\n+++ b/widgets/size.py\n"
        "@@ -3,3 +3,3 @@\n \n def area(w, h):\n-    return w + h\n+    return w * h\n",
        "test_patch": "diff --git a/tests/test_size.py b/tests/test_size.py\n--- a/tests/test_size.py\n"
        "+++ b/tests/test_size.py\n@@ -4,2 +4,6 @@ from widgets.size import area\n def test_square():\n"
        "     assert area(2, 2) == 4\n+\n+\n+def test_rectangle():\n+    assert area(3, 4) == 12\n",
        "FAIL_TO_PASS": json.dumps(["tests/test_size.py::test_rectangle"]),
        "PASS_TO_PASS": json.dumps(["tests/test_size.py::test_square"]),
        "version": "1.0",
        "test_cmd": "python -m pytest -rA -p no:cacheprovider tests/test_size.py",
        **extra,
    }


INSTALL = (
    'echo run >> "$INSTALL_LOG" && python -c "import sysconfig, pathlib; '
    "pathlib.Path(sysconfig.get_paths()['purelib'], 'helperdep.py').write_text('VALUE = 1\\n')\""
)


def test_your_own_repo_with_an_install_cached_once(tmp_path, cache, monkeypatch):
    repos = tmp_path / "repos"
    _, base = make_repo(repos, dependency=True)
    log = tmp_path / "install.log"
    monkeypatch.setenv("INSTALL_LOG", str(log))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(widget_row(base, install=INSTALL)) + "\n")
    tasks = load_instances(rows)
    env = SWEEnv(tasks=tasks, repos=str(repos), cache_dir=str(tmp_path / "cache"))
    for _ in range(2):
        env.reset(options={"task_id": "acme__widgets-1"})
        obs = env.step(bash("python -c 'import helperdep; print(helperdep.VALUE)'"))[0]
        assert obs.startswith("1"), obs
        env.step(env.reference_action())
        assert env.step(tool_call_text("submit"))[-1]["next_state"].outcome == 1.0
    assert log.read_text().split() == ["run"]  # one environment build for both episodes
    env.close()


def test_a_url_template_source(tmp_path):
    repos = tmp_path / "repos"
    _, base = make_repo(repos)
    tasks = load_instances(_rows(tmp_path, widget_row(base, install="true")))
    env = SWEEnv(tasks=tasks, repos=f"file://{repos}/{{owner}}__{{name}}", cache_dir=str(tmp_path / "cache"))
    env.reset(options={"task_id": "acme__widgets-1"})
    env.step(env.reference_action())
    assert env.step(tool_call_text("submit"))[-1]["next_state"].outcome == 1.0
    env.close()


def test_a_failing_install_is_an_infra_failure_not_the_agents(tmp_path):
    repos = tmp_path / "repos"
    _, base = make_repo(repos)
    tasks = load_instances(_rows(tmp_path, widget_row(base, install="echo cannot build >&2; exit 3")))
    env = SWEEnv(tasks=tasks, repos=str(repos), cache_dir=str(tmp_path / "cache"))
    env.reset(options={"task_id": "acme__widgets-1"})
    _, reward, _, truncated, info = env.step(bash("ls"))
    assert info["status"] == "infra_failure" and truncated and reward == 0
    assert "install failed (exit 3)" in info["next_state"].text and "cannot build" in info["next_state"].text
    assert nothing_built(tmp_path / "cache" / "envs")  # no half-built environment is kept
    env.close()


def test_a_repo_missing_from_the_source_is_named(tmp_path):
    (tmp_path / "repos").mkdir()
    tasks = load_instances(_rows(tmp_path, widget_row("0" * 40)))
    env = SWEEnv(tasks=tasks, repos=str(tmp_path / "repos"), cache_dir=str(tmp_path / "cache"))
    env.reset(options={"task_id": "acme__widgets-1"})
    info = env.step(bash("ls"))[-1]
    assert info["status"] == "infra_failure"
    assert (
        "acme/widgets is not in the directory" in info["next_state"].text and "acme__widgets" in info["next_state"].text
    )
    env.close()


def test_bad_rows_and_sources_are_named(tmp_path):
    row = widget_row("abc")
    del row["test_patch"]
    with pytest.raises(
        ValueError, match=r"instance 'acme__widgets-1' \(row 1\): missing the required field\(s\) test_patch"
    ):
        load_instances(_rows(tmp_path, row))
    with pytest.raises(ValueError, match="FAIL_TO_PASS must be a list"):
        load_instances(_rows(tmp_path, widget_row("abc", FAIL_TO_PASS="not json")))
    with pytest.raises(ValueError, match="neither a directory"):
        SWEEnv(repos=str(tmp_path / "nowhere"))
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps([widget_row("abc")]))
    assert [t.id for t in load_instances(listed)] == ["acme__widgets-1"]


def test_parquet_rows_load(tmp_path):
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "rows.parquet"
    pandas.DataFrame([widget_row("abc")]).to_parquet(path)
    task = load_instances(path).get("acme__widgets-1")
    assert task.data["FAIL_TO_PASS"] == ["tests/test_size.py::test_rectangle"]


def _rows(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_workspace_holds_base_commit_on_main_and_no_ref_to_later_work(tmp_path):
    """A mirror with the fix committed after base, a release tag and a fix branch: the reset /testbed shows only
    ``main`` at base (no remote, tag or other branch names the later commits), and it can be committed to."""
    from claw_envs.sandbox import make_sandbox
    from claw_envs.swe.workspace import checkout_command

    src = tmp_path / "src"
    who = ["-c", "user.name=m", "-c", "user.email=m@m"]
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(src)], check=True)
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    subprocess.run(["git", "add", "-A"], cwd=src, check=True)
    subprocess.run(["git", *who, "commit", "-qm", "base"], cwd=src, check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    subprocess.run(["git", *who, "commit", "-qam", "the fix"], cwd=src, check=True)
    subprocess.run(["git", "tag", "v1.0"], cwd=src, check=True)
    subprocess.run(["git", "branch", "fix-add"], cwd=src, check=True)
    mirror = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(mirror)], check=True)
    prepared = Prepared(mirror=mirror)
    with make_sandbox("local", **prepared.sandbox_options("local", {})) as box:
        env = prepared.command_env("local")
        assert box.run(checkout_command(base), timeout=120, env=env).ok
        refs = box.run("cd /testbed && git for-each-ref --format='%(refname)' && git log --all --format=%s", env=env)
        assert refs.stdout.split("\n") == ["refs/heads/main", "base", ""], refs
        assert box.run("cat /testbed/calc.py", env=env).stdout.endswith("a - b\n")
        done = box.run("cd /testbed && echo '# note' >> calc.py && git commit -qam edit && git status --short", env=env)
        assert done.ok and done.stdout == "", done
