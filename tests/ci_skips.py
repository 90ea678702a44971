"""Under ``CI=true`` a skipped test fails the run unless its reason is on ``ALLOWED``: a CI run cannot be green with a
suite skipped for want of a tool the Makefile installs (bubblewrap, Chromium, an extra).

A pytest plugin (tests/conftest.py loads it). It sees every skip, collection-time ones (a module-level
``pytest.skip``, ``importorskip``) included, in the process that decides the exit status: the only one without
pytest-xdist, the controller with it (workers send it their reports). ``python tests/ci_skips.py`` prints the list;
``make test`` does so before pytest runs.
"""

from __future__ import annotations

import os
import re

import pytest

# Searched case-insensitively in each skip's reason. What a CI machine cannot be given by `make test`, nothing else.
ALLOWED = (
    r"\b(GPU|CUDA)\b",  # no accelerator
    r"\bDocker (engine|daemon)\b",  # no Docker engine
)
_ALLOWED = [re.compile(pattern, re.IGNORECASE) for pattern in ALLOWED]


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def allowed(reason: str) -> bool:
    return any(pattern.search(reason) for pattern in _ALLOWED)


class SkipGuard:
    def __init__(self) -> None:
        self.unlisted: dict[str, str] = {}  # node id -> reason

    def record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        longrepr = report.longrepr  # (path, line, "Skipped: reason"); a list once pytest-xdist has sent it
        reason = longrepr[2] if isinstance(longrepr, tuple | list) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not allowed(reason):
            self.unlisted.setdefault(report.nodeid or str(report.fspath), reason)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if on_ci() and self.unlisted and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not (on_ci() and self.unlisted):
            return
        terminalreporter.section("skips not allowed under CI=true (tests/ci_skips.py)", red=True, bold=True)
        for nodeid, reason in sorted(self.unlisted.items()):
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(f"{len(self.unlisted)} skip(s) match none of {list(ALLOWED)}: the run fails", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # a pytest-xdist worker's exit status decides nothing
        config.pluginmanager.register(SkipGuard(), "ci_skips_guard")


if __name__ == "__main__":
    print("Under CI=true a skipped test fails the run unless its reason matches one of (tests/ci_skips.py):")
    for pattern in ALLOWED:
        print(f"  {pattern}")
