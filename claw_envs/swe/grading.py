"""Grading a patch the SWE-bench way: a fresh checkout, the patch, the ``test_patch``, the test run, the verdict.

The eval script (:func:`eval_script`) applies the patch (``git apply``, then ``patch --fuzz``), puts the
instance's test files back to ``base_commit``, applies ``test_patch`` and runs the test command between
swebench's markers, recording the command's own exit status after the end marker. How the tests are run, in
this order: the row's ``test_cmd`` (claw's extension), the 5.x row's ``eval_script``, swebench 4.x's per-repo
specs when that swebench is installed; else :class:`InfraFailure` says what is missing.

The log (stdout and stderr merged) is read by :func:`grade_log`: with ``swebench`` installed by its own parser
(the row's ``log_parser`` in 5.x's ``PARSER_REGISTRY``; for 4.x rows the per-repo parser map, pytest's otherwise)
and its F2P/P2P resolution; without it by :mod:`claw_envs.swe.pytest_log`. Either way a log with no sign that
the suite ran, whose test command failed while the parsed results show no failure, or (pytest) whose result
lines disagree with pytest's own final counts — printed fake ``PASSED`` lines — resolves nothing.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.sandbox import Sandbox, SandboxError
from claw_envs.swe import pytest_log

START = ">>>>> Start Test Output"
END = ">>>>> End Test Output"
EXIT_CODE = ">>>>> Test Exit Code"
APPLY_FAILED = ">>>>> Patch Apply Failed"
TEST_PATCH_FAILED = ">>>>> Test Patch Apply Failed"
PATCH_FILE = "/tmp/claw/model.patch"
TEST_PATCH_FILE = "/tmp/claw/test.patch"
SCRIPT_FILE = "/tmp/claw/eval.sh"
MAX_PATCH_BYTES = 16 << 20
_DIFF_PATH = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_EXIT = re.compile(rf"^{re.escape(EXIT_CODE)}: (-?\d+)\s*$", re.M)


@dataclass
class Verdict:
    """How a patch did: ``resolved``, whether it applied, the per-test report and what the run looked like."""

    resolved: bool
    applied: bool
    tests: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    suite_ran: bool = False
    parser: str = ""
    problem: str | None = None

    def counts(self) -> tuple[int, int]:
        """(graded tests that pass, graded tests) over FAIL_TO_PASS and PASS_TO_PASS."""
        ok = sum(len(v.get("success", [])) for v in self.tests.values())
        return ok, ok + sum(len(v.get("failure", [])) for v in self.tests.values())

    def to_dict(self) -> dict[str, Any]:
        """The per-test report for ``info`` and evaluation records."""
        return {
            "resolved": self.resolved,
            "patch_applied": self.applied,
            "tests_status": self.tests,
            "test_exit_code": self.exit_code,
            "suite_ran": self.suite_ran,
            "parser": self.parser,
            "problem": self.problem,
        }


def test_files(instance: Mapping[str, Any]) -> list[str]:
    """The files ``test_patch`` touches (excluded from the agent's patch, reset before grading)."""
    return sorted({b for _, b in _DIFF_PATH.findall(str(instance["test_patch"]))})


def swebench_available() -> bool:
    """Whether the ``swebench`` package is installed."""
    return importlib.util.find_spec("swebench") is not None


def eval_script(instance: Mapping[str, Any], patch_nonempty: bool, *, use_swebench: bool | None = None) -> str:
    """The bash script that grades a patch written at ``PATCH_FILE`` (``test_patch`` at ``TEST_PATCH_FILE``)."""
    base = shlex.quote(str(instance["base_commit"]))
    lines = ["cd /testbed"]
    if patch_nonempty:
        lines.append(
            f"git apply --verbose {PATCH_FILE} || patch --batch --fuzz=5 -p1 -i {PATCH_FILE} || "
            f"{{ echo '{APPLY_FAILED}'; exit 0; }}"
        )
    if instance.get("eval_script") and not instance.get("test_cmd"):
        return "\n".join([*lines, _with_exit_code(str(instance["eval_script"]))]) + "\n"
    for path in test_files(instance):
        quoted = shlex.quote(path)
        lines.append(f"git checkout -q {base} -- {quoted} 2>/dev/null || rm -f -- {quoted}")
    lines.append(f"git apply --verbose {TEST_PATCH_FILE} || {{ echo '{TEST_PATCH_FAILED}'; exit 0; }}")
    lines += [f"echo '{START}'", test_command(instance, use_swebench), "CLAW_RC=$?", f"echo '{END}'"]
    lines.append(f'echo "{EXIT_CODE}: $CLAW_RC"')
    return "\n".join(lines) + "\n"


def test_command(instance: Mapping[str, Any], use_swebench: bool | None = None) -> str:
    """The row's ``test_cmd``, else swebench 4.x's per-repo spec; :class:`InfraFailure` when neither exists."""
    if instance.get("test_cmd"):
        return str(instance["test_cmd"])
    specs = _swebench_attr("swebench.harness.constants", "MAP_REPO_VERSION_TO_SPECS", use_swebench)
    spec = (specs or {}).get(instance["repo"], {}).get(str(instance.get("version")))
    if spec and spec.get("test_cmd"):
        command = spec["test_cmd"]
        command = " ".join(command) if isinstance(command, list) else command
        return f"{command} {' '.join(shlex.quote(p) for p in test_files(instance))}"
    raise InfraFailure(
        f"instance {instance['instance_id']} says nowhere how to run its tests: give it a test_cmd (claw's "
        "extension) or a 5.x eval_script, or install a swebench with per-repo specs for "
        f"{instance['repo']} {instance.get('version')}"
    )


def _with_exit_code(script: str) -> str:
    """A 5.x ``eval_script`` with the test command's exit status recorded right after its end marker."""
    out = []
    for line in script.splitlines():
        if END in line and "CLAW_RC=$?" not in out:
            out += ["CLAW_RC=$?", line, f'echo "{EXIT_CODE}: $CLAW_RC"']
        else:
            out.append(line)
    return "\n".join(out)


def grade_log(instance: Mapping[str, Any], log: str, *, use_swebench: bool | None = None) -> Verdict:
    """The verdict on one eval log (merged stdout+stderr of :func:`eval_script`)."""
    if APPLY_FAILED in log:
        return Verdict(False, False, problem="the patch does not apply to base_commit")
    if TEST_PATCH_FAILED in log:
        raise InfraFailure(f"the test_patch of {instance['instance_id']} does not apply: the instance is broken")
    codes = _EXIT.findall(log)
    exit_code = int(codes[-1]) if codes else None  # the last one: the script's own, after the end marker
    if START not in log or END not in log:
        return Verdict(False, True, exit_code=exit_code, problem="the test run did not finish (no end marker)")
    body = log.split(START, 1)[1].rsplit(END, 1)[0]
    use = swebench_available() if use_swebench is None else use_swebench
    parse, name = _swebench_parser(instance) if use else (pytest_log.parse, "claw:pytest")
    statuses = parse(body, instance)
    ran = bool(statuses) or pytest_log.suite_ran(body) or _swebench_suite_ran(body, use)
    verdict = Verdict(False, True, statuses=statuses, exit_code=exit_code, suite_ran=ran, parser=name)
    if not ran:
        verdict.problem = "no sign that the test suite ran"
        return verdict
    failing = any(s in ("FAILED", "ERROR") for s in statuses.values())
    if exit_code not in (None, 0) and statuses and not failing:
        verdict.problem = f"the test command exited {exit_code} but the log shows no failure (printed results?)"
        return verdict
    if "pytest" in name and (mismatch := pytest_log.summary_mismatch(body, statuses)):
        verdict.problem = mismatch
        return verdict
    if use:
        verdict.tests, verdict.resolved = _swebench_report(statuses, instance)
    else:
        verdict.tests = pytest_log.report(statuses, instance)
        verdict.resolved = pytest_log.resolved(verdict.tests)
    return verdict


def _swebench_attr(module: str, name: str, use_swebench: bool | None) -> Any:
    if use_swebench is False or (use_swebench is None and not swebench_available()):
        return None
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _swebench_parser(instance: Mapping[str, Any]) -> tuple[Callable[[str, Any], dict[str, str]], str]:
    """swebench's parser for a row: 5.x ``log_parser`` by name, else the per-repo map (4.x name, then 5.x's
    Python map), else ``parse_log_pytest``."""
    from swebench.harness import log_parsers

    registry = getattr(log_parsers, "PARSER_REGISTRY", {})
    if instance.get("log_parser") in registry:
        fn, name = registry[instance["log_parser"]], str(instance["log_parser"])
    else:
        by_repo = getattr(log_parsers, "MAP_REPO_TO_PARSER", None) or _python_map()
        fn = by_repo.get(instance["repo"], log_parsers.parse_log_pytest)
        name = getattr(fn, "__name__", "parse_log_pytest")
    spec = _test_spec(instance)
    return (lambda body, _row: dict(fn(body, spec))), f"swebench:{name}"


def _python_map() -> Mapping[str, Callable[..., dict[str, str]]]:
    try:
        from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY
    except ImportError:
        return {}
    return MAP_REPO_TO_PARSER_PY


def _test_spec(instance: Mapping[str, Any]) -> Any:
    """A swebench ``TestSpec`` for the parsers that read one (most ignore it)."""
    from swebench.types import TestSpec

    return TestSpec(
        instance_id=str(instance["instance_id"]),
        image=str(instance.get("image") or ""),
        eval_script_list=[],
        repo=str(instance["repo"]),
        version=str(instance.get("version") or ""),
        FAIL_TO_PASS=list(instance["FAIL_TO_PASS"]),
        PASS_TO_PASS=list(instance["PASS_TO_PASS"]),
        log_parser=str(instance.get("log_parser") or ""),
        eval_type=str(instance.get("eval_type") or "pass_and_fail"),
    )


def _swebench_suite_ran(body: str, use: bool) -> bool:
    if not use:
        return False
    from swebench.harness.grading import SUITE_RAN

    return bool(SUITE_RAN.search(body))


def _swebench_report(
    statuses: Mapping[str, str], instance: Mapping[str, Any]
) -> tuple[dict[str, dict[str, list[str]]], bool]:
    """swebench's F2P/P2P report and whether it calls the instance fully resolved."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    gold = {FAIL_TO_PASS: list(instance["FAIL_TO_PASS"]), PASS_TO_PASS: list(instance["PASS_TO_PASS"])}
    eval_type = EvalType(instance.get("eval_type") or "pass_and_fail")
    report = get_eval_tests_report(dict(statuses), gold, eval_type=eval_type)
    tests = {key: {k: list(v) for k, v in report[key].items()} for key in (FAIL_TO_PASS, PASS_TO_PASS)}
    return tests, get_resolution_status(report) == ResolvedStatus.FULL.value


def patch_of(files: Sequence[str]) -> str:
    """Shell: the workspace's diff against ``$BASE`` (``files`` excluded), written to ``PATCH_FILE``, computed in a
    throw-away git dir that borrows the mirror's objects — whatever the agent did to ``/testbed/.git``."""
    excludes = " ".join(shlex.quote(f":(exclude){f}") for f in files)
    return (
        'set -e; D=/tmp/claw/diff.git; rm -rf "$D"; mkdir -p /tmp/claw; git init -q --bare "$D"; '
        'for o in /claw/repo/objects /testbed/.git/objects; do [ -d "$o" ] && echo "$o" >> "$D/objects/info/'
        'alternates"; done; export GIT_DIR="$D" GIT_WORK_TREE=/testbed; '
        f'git read-tree "$BASE"; git add -A -- .; git diff --cached --binary "$BASE" -- . {excludes} > {PATCH_FILE}'
    )


async def grade_patch(
    instance: Mapping[str, Any],
    patch: str,
    open_sandbox: Callable[[], Awaitable[Sandbox]],
    *,
    env: Mapping[str, str],
    timeout: float,
    use_swebench: bool | None = None,
) -> tuple[Verdict, str]:
    """Grade ``patch`` in a fresh sandbox from ``open_sandbox()`` (a new checkout at ``base_commit``); returns the
    verdict and the log. A test run past ``timeout`` resolves nothing; a broken sandbox is :class:`InfraFailure`."""
    if len(patch.encode("utf-8", errors="replace")) > MAX_PATCH_BYTES:
        return Verdict(False, False, problem=f"the patch is over {MAX_PATCH_BYTES >> 20} MiB"), ""
    sandbox = await open_sandbox()
    try:
        script = eval_script(instance, bool(patch.strip()), use_swebench=use_swebench)
        for path, text in ((PATCH_FILE, patch), (TEST_PATCH_FILE, str(instance["test_patch"])), (SCRIPT_FILE, script)):
            await asyncio.to_thread(sandbox.write_file, path, text)
        result = await sandbox.arun(f"bash {SCRIPT_FILE} 2>&1", timeout=timeout, env=dict(env))
    except SandboxError as err:
        raise InfraFailure(f"the grading sandbox failed: {err}", StepStatus.SANDBOX_FAILURE) from err
    finally:
        await asyncio.to_thread(sandbox.close)
    log = result.stdout + (f"\n{result.stderr}" if result.stderr else "")
    if result.timed_out:
        verdict = Verdict(False, True, problem=f"the test run did not finish within {timeout:g} s")
        return verdict, log
    return grade_log(instance, log, use_swebench=use_swebench), log
