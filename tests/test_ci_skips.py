"""tests/ci_skips.py: under CI=true a skip whose reason is not on the allowlist fails the run, with pytest-xdist too."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="{reason}")
def test_skipped():
    pass
"""
ARGS = ("-p", "ci_skips", "-p", "no:asyncio", "-p", "no:cacheprovider")
PASSES = "def test_runs():\n    pass\n"


@pytest.fixture
def suite(pytester: pytest.Pytester):
    def make(reason: str) -> pytest.Pytester:
        pytester.makepyfile(test_some=TESTS.format(reason=reason))
        return pytester

    return make


@pytest.mark.parametrize("ci", ["true", ""])
def test_an_allowlisted_skip_passes(suite, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    result = suite("no GPU on this machine").runpytest(*ARGS)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK


def test_an_unlisted_skip_fails_only_under_ci(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = suite("bubblewrap is not installed").runpytest(*ARGS)
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skips not allowed under CI=true*", "*test_skipped: bubblewrap is not installed"])

    monkeypatch.delenv("CI")
    assert suite("bubblewrap is not installed").runpytest(*ARGS).ret == pytest.ExitCode.OK


def test_a_module_skipped_at_collection_fails_under_ci_with_xdist(pytester: pytest.Pytester, monkeypatch):
    """The controller, not the workers, decides the exit status: it must see the workers' collection-time skips."""
    pytester.makepyfile(test_gone="import pytest\npytest.importorskip('no_such_module_claw')\n", test_ok=PASSES)
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # quicker: only the plugins it names
    result = pytester.runpytest_subprocess("-p", "xdist", "-p", "ci_skips", "-n", "2", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_gone.py: could not import 'no_such_module_claw'*"])
