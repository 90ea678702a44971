"""The package docs/adding-an-env.md builds, as the page writes it: every block titled with a file name is that
file, the package is pip-installed (its ``[build-system]``, its entry point), and then ``claw-envs list`` shows the
family and the page's own test passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding-an-env.md"
BIN = Path(sys.executable).parent
TITLED = re.compile(r'^```(?P<lang>\w+) title="(?P<path>[^"]+)"\n(?P<code>.*?)^```$', re.S | re.M)


def page_files() -> dict[str, str]:
    """``path -> text`` of every block of the page titled with a file name."""
    return {m["path"]: m["code"] for m in TITLED.finditer(DOC.read_text())}


def test_the_page_names_every_file_of_its_package():
    files = page_files()
    assert set(files) == {
        "claw-upper/pyproject.toml",
        "claw-upper/src/claw_upper/__init__.py",
        "claw-upper/src/claw_upper/env.py",
        "claw-upper/tests/test_upper.py",
    }
    layout = re.search(r"```text\n(claw-upper/\n.*?)```", DOC.read_text(), re.S)
    assert layout and all(Path(f).name in layout.group(1) for f in files if "/tests/" not in f)
    assert (
        "[build-system]" in files["claw-upper/pyproject.toml"]
        and "import claw_envs" in files["claw-upper/tests/test_upper.py"]
    )


@pytest.mark.timeout(300)
def test_the_package_on_the_page_installs_lists_and_passes_its_own_test(tmp_path):
    for rel, text in page_files().items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    done = subprocess.run([*install, str(tmp_path / "claw-upper")], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    listed = subprocess.run([str(BIN / "claw-envs"), "list"], capture_output=True, text=True, env=env, timeout=120)
    row = next((line.split("\t") for line in listed.stdout.splitlines() if line.startswith("claw/Upper-v0")), None)
    assert row == ["claw/Upper-v0", "upper", "agent", "2", "1", "write a word in capitals"], (
        listed.stdout + listed.stderr
    )
    test = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_upper.py"]
    quiet = {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the page's test needs none of claw's own pytest plugins
    ran = subprocess.run(test, cwd=tmp_path / "claw-upper", capture_output=True, text=True, env=quiet, timeout=120)
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-2000:]
