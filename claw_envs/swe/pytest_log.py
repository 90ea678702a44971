"""Our own small reader of ``pytest -rA`` logs, for grading when ``swebench`` is not installed.

It reads the short test summary (``PASSED tests/test_x.py::test_y``, ``FAILED … - reason``, ``ERROR``,
``SKIPPED``, ``XFAIL``, ``XPASS``), checks that pytest's final line (``=== 3 passed, 1 failed in 0.12s ===``)
is there and agrees with what was read, and resolves FAIL_TO_PASS / PASS_TO_PASS as SWE-bench does: an F2P test
must pass (or xfail), a P2P test must pass, xfail or be skipped.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
PASSING = ("PASSED", "XFAIL")
_LINE = re.compile(rf"^({'|'.join(STATUSES)}) (\S+)")
_FINAL = re.compile(r"^=+ (.*?) in [\d.]+s(?: \([^)]*\))? =+\s*$", re.M)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")
_SUMMARY_KEY = {"passed": "PASSED", "failed": "FAILED", "error": "ERROR", "errors": "ERROR", "xfailed": "XFAIL"}


def parse(log: str, instance: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``test id -> status`` from the ``-rA`` summary lines of ``log``."""
    statuses: dict[str, str] = {}
    for line in log.splitlines():
        m = _LINE.match(line)
        if m and "::" in m.group(2):
            statuses[m.group(2)] = m.group(1)
    return statuses


def suite_ran(log: str) -> bool:
    """Whether pytest printed its final summary line (``=== … in 0.12s ===``)."""
    return _FINAL.search(log) is not None


def summary_mismatch(log: str, statuses: Mapping[str, str]) -> str | None:
    """Why the summary lines and pytest's final counts disagree (fake lines were printed), or ``None``."""
    finals = _FINAL.findall(log)
    if not finals:
        return "pytest's final summary line is missing"
    counts: Counter[str] = Counter()
    for n, word in _COUNT.findall(finals[-1]):
        if word in _SUMMARY_KEY:
            counts[_SUMMARY_KEY[word]] += int(n)
    seen = Counter(s for s in statuses.values() if s in ("PASSED", "FAILED", "XFAIL"))
    for status in ("PASSED", "FAILED", "XFAIL"):
        if seen[status] != counts[status]:
            return f"{seen[status]} {status} lines but pytest counted {counts[status]}"
    return None


def report(statuses: Mapping[str, str], instance: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """SWE-bench's per-test report: ``{"FAIL_TO_PASS": {"success": [...], "failure": [...]}, "PASS_TO_PASS": …}``."""
    out = {}
    for key, ok in (("FAIL_TO_PASS", PASSING), ("PASS_TO_PASS", (*PASSING, "SKIPPED"))):
        tests = list(instance[key])
        out[key] = {
            "success": [t for t in tests if statuses.get(t) in ok],
            "failure": [t for t in tests if statuses.get(t) not in ok],
        }
    return out


def resolved(tests: Mapping[str, Mapping[str, list[str]]]) -> bool:
    """Every F2P and P2P test is a success."""
    return all(not part["failure"] for part in tests.values())
