"""Provisioning the system packages task folders lack: named with the one command that installs them, never
installed unless asked, installed with apt (a fake ``apt-get``/``apt-cache`` on ``PATH`` records the calls; a fake
dpkg status file records what it "installed") when asked, as root, and the tasks met afterwards."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_sandbox import needs_bwrap
from typer.testing import CliRunner

from claw_envs.terminal import provision as provision_module
from claw_envs.terminal import system
from claw_envs.terminal.folders import read_folder
from claw_envs.terminal.provision import plan
from claw_train.commands import envs

NEEDS_APT = Path(__file__).parent / "fixtures" / "harbor_wild" / "own" / "needs-apt"
PACKAGE = "claw-test-no-such-package"
COMMAND = f"apt-get install -y --no-install-recommends {PACKAGE}"
FAKE_APT_GET = """#!/bin/sh
echo "apt-get $*" >> "$CLAW_FAKE_APT_LOG"
for word in "$@"; do
  case "$word" in
    -*|install) ;;
    *) printf 'Package: %s\\nStatus: install ok installed\\n\\n' "$word" >> "$CLAW_FAKE_DPKG";;
  esac
done
"""
FAKE_APT_CACHE = """#!/bin/sh
echo "apt-cache $*" >> "$CLAW_FAKE_APT_LOG"
[ "$2" = claw-test-unknown ] && exit 100
exit 0
"""


@pytest.fixture
def fake_apt(tmp_path, monkeypatch):
    """A fake apt on PATH and an empty dpkg status; the path of the log of apt calls."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for name, text in (("apt-get", FAKE_APT_GET), ("apt-cache", FAKE_APT_CACHE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    status, log = tmp_path / "dpkg-status", tmp_path / "apt-calls.log"
    status.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CLAW_FAKE_APT_LOG", str(log))
    monkeypatch.setenv("CLAW_FAKE_DPKG", str(status))
    monkeypatch.setattr(provision_module, "DPKG_STATUS", status)
    monkeypatch.setattr(system, "is_root", lambda: True)
    provision_module.forget_dpkg()
    yield log
    provision_module.forget_dpkg()


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_missing_package_is_named_with_its_command_and_nothing_is_installed_unasked(tmp_path, fake_apt):
    shutil.copytree(NEEDS_APT, tmp_path / "tasks" / "needs-apt")
    result = CliRunner().invoke(envs.app, ["check", "terminal", "--tasks", str(tmp_path / "tasks"), "--split", "test"])
    assert result.exit_code == 1, result.output
    assert f"provisioning: 1 apt package(s) missing: {PACKAGE} (install: `{COMMAND}`, or add --provision)" in (
        result.output
    )
    assert (
        f"refused: needs-apt: this machine lacks what the task needs: apt packages not installed here: {PACKAGE} "
        in (result.output)
    )
    assert f"(install: `{COMMAND}`)" in result.output and "refused: 1; failed: 0." in result.output
    assert calls(fake_apt) == []  # never without being asked


def test_claw_envs_provision_installs_with_apt_and_the_task_is_met_after(tmp_path, fake_apt):
    shutil.copytree(NEEDS_APT, tmp_path / "tasks" / "needs-apt")
    assert plan(read_folder(tmp_path / "tasks" / "needs-apt")).missing_apt == (PACKAGE,)
    result = CliRunner().invoke(envs.app, ["provision", "terminal", "--tasks", str(tmp_path / "tasks")])
    assert result.exit_code == 0, result.output
    assert calls(fake_apt) == [f"apt-cache show {PACKAGE}", f"apt-get {COMMAND.removeprefix('apt-get ')}"]
    assert f"installed with `{COMMAND}`" in result.output
    assert plan(read_folder(tmp_path / "tasks" / "needs-apt")).problem is None  # dpkg's status read again


def test_apt_is_not_run_without_root_nor_for_a_name_it_does_not_know(fake_apt):
    not_root = system.provision([PACKAGE], as_root=False)
    assert not_root.error == f"installing needs root: run `sudo {COMMAND}`" and calls(fake_apt) == []
    unknown = system.provision(["claw-test-unknown"], as_root=True)
    assert unknown.unknown == ["claw-test-unknown"] and not unknown.installed and not unknown.error
    assert calls(fake_apt) == ["apt-cache show claw-test-unknown"]  # asked apt about it; installed nothing
    assert "apt here has no package named claw-test-unknown" in unknown.summary()


@needs_bwrap
def test_check_with_provision_installs_then_checks(tmp_path, fake_apt):
    shutil.copytree(NEEDS_APT, tmp_path / "tasks" / "needs-apt")
    args = ["check", "terminal", "--tasks", str(tmp_path / "tasks"), "--split", "test", "--provision"]
    result = CliRunner().invoke(envs.app, args)
    assert result.exit_code == 0, result.output
    assert "1 of 1 terminal tasks pass the check." in result.output and "runs here: 1;" in result.output
    assert f"apt-get {COMMAND.removeprefix('apt-get ')}" in calls(fake_apt)
