"""Preparing and grading task-folder tasks in a sandbox: the Dockerfile's files and setup before the agent, the
hidden tests after it.

**Before the agent** (:func:`prepare_folder`): the ``COPY``'d files (and heredoc ``COPY`` texts) are written into
the workdir (executable when they are on the host or start with ``#!``) and the honoured ``RUN`` lines run there,
with the task's virtualenv on ``PATH`` (:mod:`.provision`; a task this machine cannot provision is refused before).

**Grading** (:func:`grade_folder`): the tests (and the dataset's test scripts a TB1 task shares) are copied into a
host folder shown read-only at ``/tests`` and an empty host folder writable at ``/logs/verifier``, for the
verifier's command only: the agent never sees either, and a ``reward.txt`` it wrote anywhere is never read. The
verifier runs with the tests' virtualenv on ``PATH``. When the test script (with the scripts it sources from
``$TEST_DIR`` read in) only installs a test runner (apt-get, curl, uv, pip, a venv) and runs pytest on the tests,
the equivalent offline command runs instead (the tests' virtualenv's pytest, ``-rA``), and ``Grade.offline`` says
so; otherwise the script runs as it is. Harbor: the number in ``reward.txt``
(or ``reward.json``'s ``reward``) is the outcome; TB1 and offline runs: the fraction of tests passed, from the
``-rA`` summary. Tests that run past their timeout, write no reward, report no test, or need the network are an
:class:`~claw_envs.core.InfraFailure` naming why.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_envs.core import InfraFailure, StepStatus
from claw_envs.sandbox import Bind, Sandbox, SandboxError

TESTS_INSIDE = "/tests"
LOGS_INSIDE = "/logs/verifier"
_SUMMARY = re.compile(r"^=+ short test summary info =+$", re.M)
_RESULT_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED) (\S+)", re.M)
_NETWORK = re.compile(r"Could not resolve host|Temporary failure in name resolution|Network is unreachable", re.I)
_INSTALL = re.compile(
    r"^(?:sudo )?(?:apt-get|apt|apk|yum|dnf|curl|wget|pip3?|python3? -m (?:pip|venv)|source|\.|export PATH=)(?:\s|$)"
    r"|^uv (?:venv|pip|init|add|sync|python install)\b"
)
_SOURCED = re.compile(r"^(?:source|\.|bash|sh)\s+(?:\$\{?TEST_DIR\}?|/tests)/([\w.-]+)\s*$")
_BENIGN = re.compile(r"^(?:set [-+]\w+|cd |echo |if |then|else|fi|exit\b|mkdir |\w+=\S*$)")
_PYTEST = re.compile(r"(?:^|\s)(?:python3? -m )?pytest(?:==\S+)?(?=\s|$)")


@dataclass(frozen=True)
class Grade:
    """A verifier run: the outcome in [0, 1], per-test results, how it was obtained, and the tail of its output."""

    outcome: float
    tests: dict[str, str] = field(default_factory=dict)
    source: str = "pytest"
    offline: str | None = None
    output: str = ""

    @property
    def passed(self) -> int:
        """How many tests passed (an expected failure counts as passed)."""
        return sum(status in ("PASSED", "XFAIL") for status in self.tests.values())

    def to_info(self) -> dict[str, Any]:
        """The grade as JSON-friendly ``info["grading"]``."""
        return {
            "outcome": self.outcome,
            "tests": dict(self.tests),
            "source": self.source,
            "offline": self.offline,
            "output": self.output,
        }


@dataclass(frozen=True)
class Verdict:
    """How an episode was graded: ``outcome`` in [0, 1], the ``reward``, the final step's evaluative ``score`` and
    ``tag`` (``tests=3/4``), the ``text`` the agent reads and ``info`` for the step."""

    outcome: float
    reward: float
    score: float
    tag: str
    text: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def solved(self) -> bool:
        """Whether the task is fully solved (outcome 1)."""
        return self.outcome >= 1.0

    @classmethod
    def of_check(cls, solved: bool, detail: str) -> Verdict:
        """A check command's verdict: outcome and reward 1 or 0, score +1 or -1."""
        if solved:
            return cls(1.0, 1.0, 1.0, "tests=1/1", "Check passed: the task is done.")
        text = "Check failed: the task is not done." + (f"\n{detail}" if detail else "")
        return cls(0.0, 0.0, -1.0, "tests=0/1", text)

    @classmethod
    def of_grade(cls, grade: Grade) -> Verdict:
        """A task folder's verdict: the outcome (fraction of tests passed), the reward ``2·outcome − 1``, the failing
        tests named; the step that declared the task done scores +1 when it is solved and -1 when it is not."""
        counted = {name: status for name, status in grade.tests.items() if status != "SKIPPED"}
        failing = [name for name, status in counted.items() if status not in ("PASSED", "XFAIL")]
        if grade.source == "pytest" or counted:
            tag = f"tests={grade.passed}/{len(counted)}"
            text = f"Tests: {grade.passed} of {len(counted)} passed."
            if grade.source != "pytest":
                text += f" Reward {grade.outcome:g} (from {grade.source})."
        else:
            tag, text = f"reward={grade.outcome:g}", f"Tests: reward {grade.outcome:g} (from {grade.source})."
        if failing:
            text += (
                " Failing: " + ", ".join(failing[:10]) + (f" and {len(failing) - 10} more" if len(failing) > 10 else "")
            )
        score = 1.0 if grade.outcome >= 1.0 else -1.0
        return cls(grade.outcome, 2.0 * grade.outcome - 1.0, score, tag, text, {"grading": grade.to_info()})


async def prepare_folder(sandbox: Sandbox, data: dict[str, Any], timeout: float, env: dict[str, str]) -> None:
    """Write the Dockerfile's ``COPY``'d files into the workdir and run its honoured ``RUN`` lines there (``env``:
    the commands' environment, the task's virtualenv first on ``PATH``)."""
    folder = Path(data["folder"])
    executables = []
    for src, dest in data.get("copies", []):
        host = folder / src
        files = [host] if host.is_file() else sorted(p for p in host.rglob("*") if p.is_file() and not _cache(p))
        for path in files:
            inside = dest if path == host else f"{dest}/{path.relative_to(host).as_posix()}"
            content = path.read_bytes()
            await asyncio.to_thread(sandbox.write_file, inside, content)
            if os.access(path, os.X_OK) or content.startswith(b"#!"):  # an install may drop the mode, not a shebang
                executables.append(inside)
    for inside, text in data.get("inline_files", []):
        await asyncio.to_thread(sandbox.write_file, inside, text)
    commands = [f"chmod +x -- {' '.join(shlex.quote(p) for p in executables)}"] if executables else []
    for command in [*commands, *data.get("setup", [])]:
        done = await sandbox.arun(command, timeout=timeout, env=env)
        if not done.ok:
            needs = f"needs the network ({line}); " if (line := network_line(done.stdout + done.stderr)) else ""
            raise InfraFailure(
                f"the task's setup {needs}`{command[:200]}` failed (exit {done.returncode}): {done.stderr[-500:]}"
            )


def expand_sourced(script: str, tests: Path) -> str:
    """``script`` with each line that sources or runs a script of the tests folder (``source $TEST_DIR/x.sh``,
    ``bash /tests/x.sh``) replaced by that script's text (one level)."""
    lines = []
    for line in script.splitlines():
        match = _SOURCED.match(line.strip())
        path = tests / match.group(1) if match else None
        lines.append(path.read_text(encoding="utf-8", errors="replace") if path and path.is_file() else line)
    return "\n".join(lines) + "\n"


def offline_command(script: str, python: str) -> str | None:
    """The offline equivalent of a test script that only installs a test runner and runs pytest, or ``None``."""
    pytest_lines = []
    for line in _logical_lines(script):
        if _INSTALL.search(line) or _BENIGN.search(line):
            continue
        if not _PYTEST.search(line):
            return None
        pytest_lines.append(line)
    if len(pytest_lines) != 1:
        return None
    words = shlex.split(pytest_lines[0].split(";")[0].split("&&")[-1].split("||")[0], posix=True)
    after = words[next(i for i, w in enumerate(words) if w.startswith("pytest")) + 1 :]
    targets = []
    skip = False
    for word in after:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in ("-k", "-m", "-p", "--ctrf", "--junitxml", "--rootdir", "-c", "-o", "--json-report-file")
        elif "tests" in word or word.endswith(".py"):
            targets.append(re.sub(r"^\$\{?TEST_DIR\}?", TESTS_INSIDE, word).replace("//", "/"))
    targets = [t if t.startswith("/") else f"{TESTS_INSIDE}/{t.removeprefix('tests/')}" for t in targets]
    quoted = " ".join(shlex.quote(t) for t in targets or [TESTS_INSIDE])
    return f"{shlex.quote(python)} -P -m pytest -rA --color=no -p no:cacheprovider --rootdir={TESTS_INSIDE} {quoted}"


async def grade_folder(
    sandbox: Sandbox,
    data: dict[str, Any],
    *,
    timeout: float,
    python: str,
    env: dict[str, str],
    transcript: str = "",
    max_chars: int = 4000,
) -> Grade:
    """Run the hidden tests against the workdir as the agent left it (see the module docstring); ``python`` and
    ``env`` are the tests' virtualenv's interpreter and environment. A TB1 task's tests may read what the terminal
    showed after the agent (``$TEST_DIR/post-agent.txt``, which TB1's harness captures): ``transcript``, the
    episode's commands and their outputs."""
    folder = Path(data["folder"])
    try:
        tests = sandbox.host_folder("tests")
        logs = sandbox.host_folder("verifier", writable=True)
    except SandboxError as err:
        raise InfraFailure(f"cannot grade a task folder here: {err}", StepStatus.SANDBOX_FAILURE) from err
    await asyncio.to_thread(_copy_tests, folder / data["tests"], tests)
    script_path = folder / data["test_script"]
    script_name = script_path.name
    for path in [script_path, *(folder / h for h in data.get("test_helpers", []))]:
        if not (tests / path.name).exists():
            shutil.copy2(path, tests / path.name)
            (tests / path.name).chmod(0o755)
    if data["format"] == "tb1":
        (tests / "post-agent.txt").write_text(transcript, encoding="utf-8")
    script = expand_sourced(script_path.read_text(encoding="utf-8", errors="replace"), tests)
    offline = offline_command(script, python)
    command = offline or f"bash {TESTS_INSIDE}/{script_name}"
    env = {**env, "TEST_DIR": TESTS_INSIDE}
    binds = [Bind(str(tests), TESTS_INSIDE), Bind(str(logs), LOGS_INSIDE, writable=True)]
    done = await sandbox.arun(command, timeout=timeout, env=env, binds=binds)
    output = (done.stdout + done.stderr)[-max_chars:]
    if done.timed_out:
        raise InfraFailure(f"the tests did not finish within {timeout:g} s (the task's verifier timeout)")
    results = pytest_results(done.stdout)
    said = f"`{command}` exited {done.returncode}; its output ends: {output[-600:]}"
    if data["format"] == "harbor" and not offline:
        reward = _reward(logs)
        if reward is None:
            why = "needs the network" if _NETWORK.search(output) else "wrote no /logs/verifier/reward.txt"
            raise InfraFailure(f"the test script {why}: {said}")
        return Grade(reward, results, "reward.txt", None, output)
    counted = {k: v for k, v in results.items() if v != "SKIPPED"}
    if not counted:
        why = "need the network" if _NETWORK.search(output) else "reported no test results"
        raise InfraFailure(f"the tests {why}: {said}")
    passed = sum(v in ("PASSED", "XFAIL") for v in counted.values())
    note = f"the test script only installs a test runner and runs pytest; ran `{command}` instead" if offline else None
    return Grade(passed / len(counted), results, "pytest", note, output)


def network_line(output: str) -> str | None:
    """The first line of ``output`` saying a host could not be reached (a command needed the network), or ``None``."""
    return next((line.strip()[:200] for line in output.splitlines() if _NETWORK.search(line)), None)


def pytest_results(output: str) -> dict[str, str]:
    """Per-test statuses from the last ``short test summary info`` section of pytest ``-rA`` output (lines printed
    by the code under test come before it, so they cannot pose as results)."""
    headers = list(_SUMMARY.finditer(output))
    if not headers:
        return {}
    section = output[headers[-1].end() :]
    return {_test_name(name): status for status, name in _RESULT_LINE.findall(section)}


def _test_name(name: str) -> str:
    """A test's id without the way up from the workdir to the tests (``../tests/test_x.py::t`` -> ``test_x.py::t``)."""
    return re.sub(r"^(?:\.\./)*(?:tests/)?", "", name)


def _reward(logs: Path) -> float | None:
    """The number the verifier wrote to ``reward.txt`` (or ``reward.json``'s ``reward``), clipped to [0, 1]."""
    try:
        if (logs / "reward.txt").is_file():
            value = float((logs / "reward.txt").read_text().strip())
        elif (logs / "reward.json").is_file():
            value = float(json.loads((logs / "reward.json").read_text())["reward"])
        else:
            return None
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return min(max(value, 0.0), 1.0)


def _copy_tests(source: Path, dest: Path) -> None:
    """The tests, readable (not writable) by the sandbox user: files 0644 (0755 when executable), folders 0755."""
    shutil.copytree(source, dest, dirs_exist_ok=True, symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)


def _cache(path: Path) -> bool:
    """Whether ``path`` is bytecode an install compiled (``__pycache__``), not a file of the task."""
    return "__pycache__" in path.parts


def _logical_lines(script: str) -> list[str]:
    """The script's commands: continuation lines joined; comments, blank lines and the shebang dropped."""
    lines, current = [], ""
    for raw in script.splitlines():
        stripped = raw.strip()
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        line = (current + stripped).strip()
        current = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines
