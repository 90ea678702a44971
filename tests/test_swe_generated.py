"""Files an instance's install generates (a version file, a compiled extension) are in every workspace and grading
checkout, as in SWE-bench's images where the repository is installed in place: kept from the environment's build,
copied in before the checkout, invisible to git and left out of the agent's patch. A file the project declares as
generated that the install did not write is an infrastructure failure. (A real repository: test_swe_real_generated.)
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from claw_envs.swe.actions import tool_call_text
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.generated import EXCLUDE, FILES, carry, declared_files
from claw_envs.swe.repos import FIXED_IDENTITY, dir_name
from claw_envs.swe.tasks import load_instances
from claw_envs.swe.workspace import Prepared
from tests.test_sandbox import needs_bwrap

ID = "acme__stamped-1"
GENERATES = (
    "printf 'version = \"1.0\"\\n' > src/stamped/_version.py && printf 'TABLE = 3\\n' > src/stamped/_table.py && "
    "printf 'fake' > _cstamp.abi3.so && mkdir -p build/lib src/stamped.egg-info src/stamped/__pycache__ && "
    "touch build/lib/copy.py src/stamped.egg-info/PKG-INFO src/stamped/__pycache__/x.pyc install-notes.txt"
)


def git(*args: str, cwd: Path) -> str:
    env = {**FIXED_IDENTITY, "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def make_stamped(root: Path) -> tuple[Path, str]:
    """A src-layout project whose package imports a version file its build writes (git-ignored, declared for
    hatch-vcs) and a generated table (not ignored); returns (path, base commit)."""
    path = root / dir_name("acme/stamped")
    (path / "src" / "stamped").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / ".gitignore").write_text("/src/stamped/_version.py\n")
    (path / "pyproject.toml").write_text(
        '[project]\nname = "stamped"\ndynamic = ["version"]\n'
        '[tool.hatch.build.hooks.vcs]\nversion-file = "src/stamped/_version.py"\n'
    )
    (path / "src" / "stamped" / "__init__.py").write_text(
        "from ._table import TABLE\nfrom ._version import version\n\n\ndef triple(x):\n    return x + TABLE\n"
    )
    (path / "tests" / "test_stamped.py").write_text("from stamped import triple\n\n\ndef test_one():\n    pass\n")
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-qm", "stamped", cwd=path)
    return path, git("rev-parse", "HEAD", cwd=path).strip()


def stamped_row(base: str, install: str) -> dict:
    return {
        "instance_id": ID,
        "repo": "acme/stamped",
        "base_commit": base,
        "problem_statement": "triple(2) returns 5, not 6.",
        "patch": "diff --git a/src/stamped/__init__.py b/src/stamped/__init__.py\n--- a/src/stamped/__init__.py\n"
        "+++ b/src/stamped/__init__.py\n@@ -5,2 +5,2 @@ from ._version import version\n def triple(x):\n"
        "-    return x + TABLE\n+    return x * TABLE\n",
        "test_patch": "diff --git a/tests/test_stamped.py b/tests/test_stamped.py\n--- a/tests/test_stamped.py\n"
        "+++ b/tests/test_stamped.py\n@@ -4,2 +4,6 @@ from stamped import triple\n def test_one():\n     pass\n"
        "+\n+\n+def test_triple():\n+    assert triple(2) == 6\n",
        "FAIL_TO_PASS": ["tests/test_stamped.py::test_triple"],
        "PASS_TO_PASS": ["tests/test_stamped.py::test_one"],
        "install": install,
        "test_cmd": "python -m pytest -rA -p no:cacheprovider tests/test_stamped.py",
    }


def stamped_env(tmp_path: Path, install: str) -> SWEEnv:
    _, base = make_stamped(tmp_path / "repos")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(stamped_row(base, install)) + "\n")
    return SWEEnv(tasks=load_instances(rows), repos=str(tmp_path / "repos"), cache_dir=str(tmp_path / "cache"))


def bash(command: str) -> str:
    return tool_call_text("bash", {"command": command})


@needs_bwrap
def test_the_installs_files_are_in_the_workspace_and_the_grading_checkout_and_not_in_the_patch(tmp_path):
    env = stamped_env(tmp_path, GENERATES)
    env.reset(options={"task_id": ID})
    obs = env.step(bash("git status --short; python -c 'import stamped; print(stamped.version, stamped.TABLE)'"))[0]
    assert obs.startswith("1.0 3"), obs  # imported from /testbed/src; git shows nothing: ignored or excluded
    assert env.prepared.generated_files == ("_cstamp.abi3.so", "src/stamped/_table.py", "src/stamped/_version.py")
    env.step(bash("echo 'TABLE = 4' > src/stamped/_table.py"))  # an edit to a generated file is not the patch
    env.step(env.reference_action())
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    assert reward == 1.0 and info["report"]["tests_status"]["FAIL_TO_PASS"]["success"], info["report"]
    assert re.findall(r"^diff --git a/(\S+)", info["patch"], re.M) == ["src/stamped/__init__.py"]

    env.reset(options={"task_id": ID})
    _, reward, _, _, info = env.step(tool_call_text("submit"))
    assert reward == -1.0 and info["report"]["test_exit_code"] == 1  # the suite ran: the test failed, not the import
    assert info["report"]["tests_status"]["PASS_TO_PASS"]["success"] == ["tests/test_stamped.py::test_one"]
    env.close()


@needs_bwrap
def test_a_declared_file_the_install_does_not_write_is_an_infra_failure(tmp_path):
    env = stamped_env(tmp_path, "printf 'TABLE = 3\\n' > src/stamped/_table.py")
    env.reset(options={"task_id": ID})
    _, reward, _, truncated, info = env.step(bash("ls"))
    text = info["next_state"].text
    assert info["status"] == "infra_failure" and truncated and reward == 0
    assert "did not generate src/stamped/_version.py ([tool.hatch.build.hooks.vcs] version-file)" in text, text
    assert "pip install -e ." in text
    envs = tmp_path / "cache" / "envs"
    assert not [p for p in envs.iterdir() if p.name.startswith("acme")] and not list((envs / "builds").iterdir())
    env.close()


@needs_bwrap
def test_a_file_base_commit_tracks_wins_and_a_shallow_mirror_has_a_history(tmp_path):
    from claw_envs.sandbox import make_sandbox

    path, _ = make_stamped(tmp_path)
    (path / "NOTES").write_text("tracked\n")
    git("add", "NOTES", cwd=path)
    git("commit", "-qm", "notes", cwd=path)
    base = git("rev-parse", "HEAD", cwd=path).strip()
    mirror = tmp_path / "mirror.git"
    git("clone", "-q", "--bare", "--depth", "1", f"file://{path}", str(mirror), cwd=tmp_path)
    made = tmp_path / "generated"
    for rel, text in (("NOTES", "generated\n"), ("src/stamped/_version.py", "version = '2'\n")):
        (made / FILES / rel).parent.mkdir(parents=True, exist_ok=True)
        (made / FILES / rel).write_text(text)
    (made / EXCLUDE).write_text("/NOTES\n/src/stamped/_version.py\n")
    prepared = Prepared(mirror=mirror, generated=made, generated_files=("NOTES", "src/stamped/_version.py"))
    with make_sandbox("local", **prepared.sandbox_options("local", {})) as box:
        env = prepared.command_env("local")
        assert box.run(prepared.checkout(base), timeout=120, env=env).ok
        done = box.run(
            "cd /testbed && cat NOTES src/stamped/_version.py && git status --short && git log --format=%s", env=env
        )
        assert done.stdout == "tracked\nversion = '2'\nnotes\n", done


def test_the_files_a_project_declares_as_generated(tmp_path):
    def declared(text: str) -> dict[str, str]:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        (folder / "pyproject.toml").write_text(text)
        return declared_files(folder)

    hatch = '[tool.hatch.build.hooks.vcs]\nversion-file = "src/a/_version.py"\n'
    assert declared(hatch) == {"src/a/_version.py": "[tool.hatch.build.hooks.vcs] version-file"}
    target = '[tool.hatch.build.targets.wheel.hooks.vcs]\nversion-file = "./b/version.py"\n'
    assert declared(target) == {"b/version.py": "[tool.hatch.build.targets.wheel.hooks.vcs] version-file"}
    scm = '[tool.setuptools_scm]\nwrite_to = "c/_v.py"\n'
    assert declared(scm) == {"c/_v.py": "[tool.setuptools_scm] write_to"}
    assert declared('[tool.setuptools_scm]\nversion_file = "d.py"\n') == {"d.py": "[tool.setuptools_scm] version_file"}
    assert declared('[tool.hatch.version]\nsource = "vcs"\n') == {}  # a version from git, no file
    assert declared("not = [toml") == {}


def test_what_is_carried_and_what_is_left(tmp_path):
    path, _ = make_stamped(tmp_path)
    subprocess.run(["bash", "-c", GENERATES], cwd=path, check=True)
    (path / "src" / "stamped" / "odd[1].py").write_text("")
    dest = tmp_path / "out"
    carried = carry(path, dest, {})
    assert carried == ["_cstamp.abi3.so", "src/stamped/_table.py", "src/stamped/_version.py", "src/stamped/odd[1].py"]
    assert (dest / FILES / "src" / "stamped" / "_version.py").read_text() == 'version = "1.0"\n'
    assert (dest / EXCLUDE).read_text().splitlines()[1:] == ["/" + p for p in carried[:3]] + [
        "/src/stamped/odd\\[1].py"
    ]
    assert carry(path, tmp_path / "again", {"install-notes.txt": "declared"})[1] == "install-notes.txt"
    assert carry(make_stamped(tmp_path / "clean")[0], tmp_path / "none", {}) == [] and not (tmp_path / "none").exists()
