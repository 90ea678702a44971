"""Provisioning real task folders on this machine: cached per-task virtualenvs that see nothing of claw's own,
real Terminal-Bench tasks whose pip packages make their oracle pass, refusals that name what is missing, and
``claw-envs check`` listing each task once (bubblewrap and, on a cold cache, PyPI)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_sandbox import needs_bwrap
from typer.testing import CliRunner

from claw_envs.check import check_task
from claw_envs.sandbox import LocalSandbox
from claw_envs.terminal import TerminalEnv
from claw_envs.terminal.folders import read_folder
from claw_envs.terminal.provision import build, host_package, plan
from claw_envs.terminal.venvs import READY, VenvError, cache_root, ensure_venv
from claw_train.commands import envs

REAL = Path(__file__).parent / "fixtures" / "real_terminal"
CORE = REAL / "terminal-bench-core" / "tasks"


def run_python(venv: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    command = [str(venv / "bin" / "python"), "-c", code]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=venv)  # not the checkout's folder


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="claw's train extra (trl) is not installed")
def test_a_task_virtualenv_sees_none_of_claws_packages():
    environments = build(plan(read_folder(CORE / "hello-world")))  # nothing asked: seeded offline, cached
    done = run_python(environments.agent, "import trl")
    assert done.returncode == 1 and "No module named 'trl'" in done.stderr
    probe = (
        "import sys, importlib.util as u; print(sys.prefix)\n"
        "print([m for m in ('pytest', 'claw_envs', 'torch', 'yaml') if u.find_spec(m)])"
    )
    prefix, found = run_python(environments.agent, probe).stdout.splitlines()
    assert Path(prefix) == environments.agent and found == "[]"  # not even pytest for the agent
    assert run_python(environments.tests, probe).stdout.splitlines()[1] == "['pytest']"  # the tests get pytest
    assert str(cache_root()) in str(environments.agent) and (environments.agent / READY).is_file()


@needs_bwrap
def test_inside_the_sandbox_python_and_pip_are_the_tasks_and_work_offline():
    environments = build(plan(read_folder(CORE / "hello-world")))
    box = LocalSandbox(binds_ro=environments.binds())
    try:
        env = environments.command_env({"PATH": "/opt/venv/bin:$PATH"}, tests=True)
        script = "command -v python3; python3 -c 'import trl' 2>&1 | tail -1; pip install pytest"
        done = box.run(script, timeout=60, env=env)
    finally:
        box.close()
    lines = done.stdout.splitlines()
    assert lines[0] == str(environments.tests / "bin" / "python3"), done.stdout + done.stderr
    assert lines[1] == "ModuleNotFoundError: No module named 'trl'"
    assert "Requirement already satisfied: pytest" in done.stdout and done.returncode == 0  # no network needed
    assert env["PATH"].startswith(f"/opt/venv/bin:{environments.tests}/bin:")  # the Dockerfile's ENV PATH=...:$PATH


def test_the_cache_is_keyed_locked_and_never_takes_a_half_built_venv(tmp_path):
    first = ensure_venv([], root=tmp_path)
    assert ensure_venv([], root=tmp_path) == first  # from the cache
    link = next(p for p in tmp_path.iterdir() if p.is_symlink())
    assert link.resolve() == first and json.loads((first / READY).read_text()) == {"requirements": [], "options": []}
    # a build that died half-way (no marker) behind the key: not taken, swept, rebuilt
    half = tmp_path / "builds" / f"{link.name}-dead0000"
    shutil.copytree(first, half, symlinks=True)
    (half / READY).unlink()
    link.unlink()
    link.symlink_to(half)
    again = ensure_venv([], root=tmp_path)
    assert again not in (first, half) and (again / READY).is_file() and not half.exists() and not first.exists()
    seeded = ensure_venv(["pytest"], root=tmp_path)  # another key; this installation's pytest, copied
    # byte-compiled when built (looked at before anything imports it): read-only in the sandbox, an uncompiled
    # module is compiled again by every process
    site = next((seeded / "lib").glob("python*/site-packages"))
    assert list((site / "_pytest" / "__pycache__").glob("main.*.pyc"))
    assert seeded != again and run_python(seeded, "import pytest").returncode == 0
    with pytest.raises(VenvError, match="is not a pip requirement"):
        ensure_venv(["numpy; ; ("], root=tmp_path)


@needs_bwrap
@pytest.mark.parametrize("task", ["heterogeneous-dates", "organization-json-generator"])
def test_real_tasks_needing_pip_packages_pass_their_oracle_through_the_task_virtualenv(task):
    env = TerminalEnv(tasks=str(CORE / task), split="test")
    try:
        result = env._run(check_task(env, task))
        data = env.tasks.get(task).data
    finally:
        env.close()
    assert result.problem is None and result.oracle.outcome == 1.0 and not result.approximate, result
    assert data["pip"] and all(r in plan(data).env_requirements for r in data["pip"])  # pandas numpy / jsonschema


@needs_bwrap
def test_what_a_real_task_lacks_here_is_named_a_missing_package_refuses_it():
    env = TerminalEnv(tasks=str(CORE), split="test")
    try:
        rust = env._run(check_task(env, "polyglot-rust-c")) if host_package("rustc") is None else None
        csv = env._run(check_task(env, "csv-to-parquet"))  # its solution fetches uv from the network
    finally:
        env.close()
    assert rust is None or rust.oracle.error == (
        "[sandbox_failure] this machine lacks what the task needs: apt packages not installed here: rustc "
        "(install: `apt-get install -y --no-install-recommends rustc`) (use sandbox='docker')"
    )
    assert rust is None or (rust.verdict == "refused" and rust.null is None)  # nothing played: refused at reset
    assert csv.problem == (
        "the oracle solution does not solve it (outcome 0.0): a command of the episode needed the network "
        "(curl: (6) Could not resolve host: astral.sh)"
    )


@needs_bwrap
def test_claw_envs_check_lists_each_task_once_and_approximate_environments_apart(tmp_path):
    shutil.copytree(REAL / "aider_polyglot" / "polyglot_python_wordy", tmp_path / "polyglot_python_wordy")
    result = CliRunner().invoke(envs.app, ["check", "terminal", "--tasks", str(tmp_path)])  # --split all
    assert result.exit_code == 0, result.output
    assert "1 of 1 terminal tasks pass the check." in result.output  # not twice, as the train and the test split
    assert "runs here: 0; runs approximately: 1; no oracle (no solution to play; loadable): 0;" in result.output
    assert "ran with an approximate environment: polyglot_python_wordy" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("polyglot_python_wordy\t"))
    assert "\tok, approximate environment: add-apt-repository ppa:deadsnakes/ppa (adds a package source" in row
