"""SWE grading: real patches graded in real checkouts, 4.x and 5.x rows, with swebench's parsers and with ours,
and logs that try to pass without the tests passing."""

from __future__ import annotations

import asyncio
import json

import pytest

from claw_envs.swe import grading, pytest_log
from claw_envs.swe.env import SWEEnv
from claw_envs.swe.evaluation import read_predictions
from claw_envs.swe.tasks import builtin_instances, normalise
from tests.test_sandbox import needs_bwrap

pytestmark = needs_bwrap  # /testbed is a bubblewrap mount

INSTANCE = "claw-examples__ledger-9"  # format_cents(-5): F2P test_format_negative_cents, 3 P2P tests


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = SWEEnv(split="test", cache_dir=str(tmp_path_factory.mktemp("swe-cache")))
    yield env
    env.close()


def grade(env: SWEEnv, row: dict, patch: str, use_swebench: bool, timeout: float = 120.0):
    env.instance = normalise(row)
    env.prepared = None
    env.test_timeout = timeout
    env.use_swebench = use_swebench
    return asyncio.run(env.grade(patch))


def row_4x() -> dict:
    return dict(builtin_instances("test").get(INSTANCE).data)


def row_5x() -> dict:
    """The same instance as a swebench 5.x row: no test_cmd, an eval_script (it applies test_patch itself),
    ``log_parser``, ``eval_type`` and ``image``."""
    row = row_4x()
    test_patch = row["test_patch"]
    row.pop("test_cmd")
    row.update(
        image="sweb.eval.x86_64.claw-examples_1776_ledger-9:latest",
        log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
        eval_script="\n".join(
            [
                "#!/bin/bash",
                "set -uxo pipefail",
                "cd /testbed",
                f"git checkout {row['base_commit']} tests/test_money.py",
                "git apply -v - <<'EOF_114329324912'",
                test_patch.rstrip("\n"),
                "EOF_114329324912",
                f": '{grading.START}'",
                "python -m pytest -rA -p no:cacheprovider tests/test_money.py",
                f": '{grading.END}'",
                f"git checkout {row['base_commit']} tests/test_money.py",
            ]
        ),
    )
    return row


FAKE_CONFTEST = """\
diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,10 @@
+import os
+import sys
+
+
+def pytest_sessionstart(session):
+    for name in ("test_format_negative_cents", "test_split_exact", "test_split_rejects_zero_parts",
+                 "test_format_cents"):
+        print(f"PASSED tests/test_money.py::{name}")
+    sys.stdout.flush()
+    os._exit(EXIT)
"""


@pytest.mark.parametrize("make_row", [row_4x, row_5x], ids=["4.x", "5.x"])
@pytest.mark.parametrize("use_swebench", [True, False], ids=["swebench", "ours"])
def test_gold_resolves_and_empty_does_not(env, make_row, use_swebench):
    if use_swebench:
        pytest.importorskip("swebench")
    row = make_row()
    verdict, log = grade(env, row, row["patch"], use_swebench)
    assert verdict.resolved, (verdict, log[-2000:])
    assert verdict.parser.startswith("swebench:" if use_swebench else "claw:")
    assert verdict.exit_code == 0 and verdict.suite_ran
    assert verdict.tests["FAIL_TO_PASS"]["success"] == ["tests/test_money.py::test_format_negative_cents"]
    assert len(verdict.tests["PASS_TO_PASS"]["success"]) == 3

    verdict, log = grade(env, row, "", use_swebench)
    assert not verdict.resolved and verdict.applied
    assert verdict.tests["FAIL_TO_PASS"]["failure"] == ["tests/test_money.py::test_format_negative_cents"]
    assert verdict.exit_code == 1


@pytest.mark.parametrize("exit_code", [0, 1])
@pytest.mark.parametrize("use_swebench", [True, False], ids=["swebench", "ours"])
def test_a_patch_printing_fake_passed_lines_resolves_nothing(env, use_swebench, exit_code):
    if use_swebench:
        pytest.importorskip("swebench")
    patch = FAKE_CONFTEST.replace("EXIT", str(exit_code))
    verdict, log = grade(env, row_4x(), patch, use_swebench)
    assert "PASSED tests/test_money.py::test_format_negative_cents" in log  # the fake lines were printed
    assert not verdict.resolved and verdict.problem, verdict


def test_a_patch_that_does_not_apply_is_unresolved_and_said(env):
    bad = "diff --git a/ledger/money.py b/ledger/money.py\n--- a/ledger/money.py\n+++ b/ledger/money.py\n"
    bad += "@@ -1,2 +1,2 @@\n-no such line\n+still no such line\n context\n"
    verdict, _ = grade(env, row_4x(), bad, use_swebench=False)
    assert not verdict.resolved and not verdict.applied
    assert "does not apply" in verdict.problem


def test_a_test_run_that_never_ends_is_cut_and_unresolved(env):
    row = row_4x()
    hang = row["patch"] + (
        "diff --git a/ledger/stats.py b/ledger/stats.py\n--- a/ledger/stats.py\n+++ b/ledger/stats.py\n"
        '@@ -1,2 +1,4 @@\n """Statistics over amounts."""\n+while True:\n+    pass\n \n'
    )
    verdict, _ = grade(env, row, hang, use_swebench=False, timeout=4.0)
    assert not verdict.resolved
    assert "did not finish within 4 s" in verdict.problem


def test_a_broken_test_patch_is_the_instances_fault(env):
    from claw_envs import InfraFailure

    row = row_4x()
    row["test_patch"] = row["test_patch"].replace(' format_cents(5) == "0.05"', ' format_cents(6) == "0.06"')
    assert row["test_patch"] != row_4x()["test_patch"]
    with pytest.raises(InfraFailure, match=r"test_patch .* does not apply"):
        grade(env, row, row["patch"], use_swebench=False)


def test_a_row_with_no_way_to_run_its_tests_is_a_clear_infra_failure(env):
    from claw_envs import InfraFailure

    row = row_4x()
    row.pop("test_cmd")
    with pytest.raises(InfraFailure, match="give it a test_cmd"):
        grade(env, row, row["patch"], use_swebench=False)


LOG = f"""\
{grading.START}
============================= test session starts ==============================
collected 2 items

tests/test_x.py .F                                                       [100%]
=========================== short test summary info ============================
PASSED tests/test_x.py::test_a
FAILED tests/test_x.py::test_b - assert 1 == 2
========================= 1 failed, 1 passed in 0.05s ==========================
{grading.END}
{grading.EXIT_CODE}: 1
"""
ROW = {"instance_id": "o__r-1", "repo": "o/r", "FAIL_TO_PASS": ["tests/test_x.py::test_b"], "PASS_TO_PASS": []}
ROW |= {"PASS_TO_PASS": ["tests/test_x.py::test_a"], "base_commit": "abc", "test_patch": ""}


@pytest.mark.parametrize("use_swebench", [True, False])
def test_logs_are_read_as_pytest_wrote_them(use_swebench):
    if use_swebench:
        pytest.importorskip("swebench")
    verdict = grading.grade_log(ROW, LOG, use_swebench=use_swebench)
    assert not verdict.resolved and verdict.exit_code == 1
    assert verdict.statuses == {"tests/test_x.py::test_a": "PASSED", "tests/test_x.py::test_b": "FAILED"}
    fixed = LOG.replace("FAILED tests/test_x.py::test_b - assert 1 == 2", "PASSED tests/test_x.py::test_b")
    fixed = fixed.replace("1 failed, 1 passed", "2 passed")
    fixed = fixed.replace(f"{grading.EXIT_CODE}: 1", f"{grading.EXIT_CODE}: 0")
    assert grading.grade_log(ROW, fixed, use_swebench=use_swebench).resolved
    # a forged exit-code line inside the output does not count: the script's own, the last one, does
    forged = fixed.replace(f"{grading.EXIT_CODE}: 0", f"{grading.EXIT_CODE}: 2").replace(
        "collected 2 items", f"collected 2 items\n{grading.EXIT_CODE}: 0"
    )
    verdict = grading.grade_log(ROW, forged, use_swebench=use_swebench)
    assert not verdict.resolved and verdict.exit_code == 2
    assert not grading.grade_log(ROW, LOG.replace(grading.END, ""), use_swebench=use_swebench).resolved
    extra = fixed.replace("PASSED tests/test_x.py::test_a", "PASSED tests/test_x.py::test_a\nPASSED tests/test_x.py::t")
    assert "counted" in grading.grade_log(ROW, extra, use_swebench=use_swebench).problem


def test_a_log_with_no_sign_the_suite_ran_resolves_nothing():
    row = dict(ROW, FAIL_TO_PASS=["tests/test_x.py::test_b"], PASS_TO_PASS=[])
    log = f"{grading.START}\nImportError: no module named x\n{grading.END}\n{grading.EXIT_CODE}: 0\n"
    verdict = grading.grade_log(row, log, use_swebench=False)
    assert not verdict.resolved and verdict.problem == "no sign that the test suite ran"


def test_the_5x_eval_script_gets_its_exit_code_recorded():
    script = grading.eval_script(row_5x(), patch_nonempty=True)
    lines = script.splitlines()
    end = next(i for i, line in enumerate(lines) if grading.END in line)
    assert lines[end - 1] == "CLAW_RC=$?" and lines[end + 1] == f'echo "{grading.EXIT_CODE}: $CLAW_RC"'
    assert lines[1].startswith(f"git apply --verbose {grading.PATCH_FILE}")


def test_test_files_come_from_the_test_patch():
    assert grading.test_files(row_4x()) == ["tests/test_money.py"]


def test_pytest_reader_counts():
    assert pytest_log.suite_ran(LOG) and not pytest_log.suite_ran("PASSED a::b\n")
    assert pytest_log.summary_mismatch(LOG, pytest_log.parse(LOG)) is None


def test_predictions_files_jsonl_and_json_and_their_errors(tmp_path):
    rows = [{"instance_id": "a", "model_patch": "", "model_name_or_path": "m"}]
    rows.append({"instance_id": "b", "model_patch": None})
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    as_list = tmp_path / "p.json"
    as_list.write_text(json.dumps(rows))
    assert [p["instance_id"] for _, p in read_predictions(jsonl)] == ["a", "b"]
    assert [p["instance_id"] for _, p in read_predictions(as_list)] == ["a", "b"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: a prediction needs a 'model_patch'"):
        read_predictions(bad)
