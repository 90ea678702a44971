"""``claw/SWE-v0``: fix an issue in a real repository with bash commands, graded by its hidden tests.

The repository is at ``/testbed`` at the instance's ``base_commit`` (see :mod:`.workspace`). Each turn the model
runs ONE bash command (a ``bash`` tool call or a fenced ```bash block) or submits (a ``submit`` tool call, or a
command whose output's first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``). Submitting, or reaching
``max_turns`` (30), grades the workspace (see :mod:`.grading`): its diff against ``base_commit`` with the
instance's test files left out, applied to a fresh checkout, then ``test_patch``, then the tests.

Step signals (``info["next_state"]``):

* Command turn: ``role="tool"``, the output (head and tail) and ``returncode=N``; ``evaluative`` +0.5 for exit
  0, -1 for a failure, a timeout, a command repeated after it failed, an edit to a test file, a Python syntax
  error left in an edited file, or ``.git`` deleted, with a ``directive`` saying what was wrong (:mod:`.signals`).
* A turn the env cannot act on (no command, two commands, malformed tool call): -1 with a directive, nothing runs.
* The grading step: ``outcome`` +1 (resolved) or -1 (not), ``reward`` the same, tag ``tests=k/n`` over the
  FAIL_TO_PASS and PASS_TO_PASS tests; ``info["report"]`` is the per-test report and ``info["patch"]`` the patch.

The repository source (``repos``), the cache, a failed install, a broken sandbox or an instance whose test
patch does not apply are the environment's faults: a typed infrastructure failure (``info["status"]``), never -1.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from claw_envs.core import (
    ClawEnv,
    Evaluative,
    InfraFailure,
    Message,
    NextState,
    Opening,
    StepStatus,
    Transition,
)
from claw_envs.messages import step_history
from claw_envs.sandbox import ExecResult, LocalSandbox, Sandbox, SandboxError, make_sandbox
from claw_envs.sandbox.episode import EpisodeSandbox
from claw_envs.swe.actions import SUBMIT_MARKER, TOOLS, Turn, read_turn, submits, tool_call_text
from claw_envs.swe.demos import demonstrations
from claw_envs.swe.grading import PATCH_FILE, Verdict, grade_patch, patch_of, test_files
from claw_envs.swe.repos import RepoSource
from claw_envs.swe.signals import Findings, command_signal
from claw_envs.swe.tasks import builtin_instances, normalise
from claw_envs.swe.workspace import Prepared, Workspaces
from claw_envs.tasks import Task, TaskSource, TaskSourceLike

SYSTEM_PROMPT = """\
You are a software engineer fixing an issue in the repository at /testbed (your current directory). There is \
no network; each command runs in a fresh shell with a {timeout:g}-second limit, and your changes to files persist.

Run one bash command per turn, as a tool call:
<tool_call>{{"name": "bash", "arguments": {{"command": "grep -rn 'def slugify' ."}}}}</tool_call>
or as a fenced block:
```bash
grep -rn 'def slugify' .
```
Find the code the issue is about, change it, and check your fix by running the tests or a small script. Do not \
edit the existing tests: hidden tests decide whether the issue is fixed. When you are done, submit:
<tool_call>{{"name": "submit", "arguments": {{}}}}</tool_call>
(or run `echo {marker}`). You have {turns} turns.

Available tools (JSON schema):
{tools}"""

EDITING = re.compile(
    r"sed\s+-i|perl\s+-[a-z]*i|>|\btee\b|\bpatch\b|git\s+(?:apply|checkout|restore|stash|reset)|"
    r"\bpython|\bmv\b|\bcp\b|\bed\b|\bex\b|\bvi\b|\brm\b"
)
STAMP = "/tmp/claw/stamp"
SYNTAX_CHECK = (
    "find /testbed -name '*.py' -newer "
    + STAMP
    + " -not -path '*/.git/*' -print0 | xargs -0 -r python -c "
    + shlex.quote(
        "import sys\nfor f in sys.argv[1:]:\n    try:\n        compile(open(f, 'rb').read(), f, 'exec')\n"
        "    except SyntaxError as e:\n        print(f'{e.filename}:{e.lineno}: SyntaxError: {e.msg}')"
    )
)


class SWEEnv(ClawEnv):
    """SWE-bench instances in a sandbox; see the module docstring.

    ``tasks`` (a JSONL/JSON/parquet file or a dataset id, :mod:`.tasks`, or a task source) replaces the built-in
    instances. ``repos`` is the repository source (a directory of ``owner__name`` clones or a URL template;
    :mod:`.repos`), ``cache_dir`` the cache of mirrors and virtualenvs. ``sandbox`` is ``local`` (bubblewrap) or
    ``docker`` (the instance's image); ``sandbox_options`` go to its constructor. ``command_timeout`` limits
    each command, ``test_timeout`` the graded test run, ``max_output_chars`` what the model sees of an output;
    ``use_swebench`` picks the grader (None: swebench's when installed).
    """

    default_max_turns = 30

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
        repos: str | None = None,
        cache_dir: str | None = None,
        sandbox: str = "local",
        sandbox_options: Mapping[str, Any] | None = None,
        command_timeout: float = 30.0,
        test_timeout: float = 300.0,
        max_output_chars: int = 4000,
        use_swebench: bool | None = None,
    ):
        super().__init__(tasks, split=split, max_turns=max_turns, render_mode=render_mode)
        self.workspaces = Workspaces(RepoSource(repos, cache_dir))
        self.sandbox_kind = sandbox
        self.sandbox_options = dict(sandbox_options or {})
        self.command_timeout = command_timeout
        self.test_timeout = test_timeout
        self.max_output_chars = max_output_chars
        self.use_swebench = use_swebench
        self.instance: dict[str, Any] = {}
        self.box: EpisodeSandbox | None = None
        self.prepared: Prepared | None = None
        self._commands = 0
        self._gold_applied = False
        self._last_failed: str | None = None
        self._tests_seen: dict[str, bytes | None] = {}
        self._git_present = True

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        return builtin_instances(split)

    # -- episode -----------------------------------------------------------------------------

    def opening_messages(self, instance: Mapping[str, Any]) -> list[Message]:
        """The system prompt (how to act and submit, the tool schemas) and the issue."""
        system = SYSTEM_PROMPT.format(
            timeout=self.command_timeout,
            turns=self.max_turns,
            marker=SUBMIT_MARKER,
            tools=json.dumps(TOOLS, ensure_ascii=False),
        )
        issue = f"Fix this issue in {instance['repo']}:\n\n{str(instance['problem_statement']).strip()}"
        return [{"role": "system", "content": system}, {"role": "user", "content": issue}]

    async def _begin(self, task: Task) -> Opening:
        try:
            self.instance = normalise(task.data)
        except ValueError as err:
            raise ValueError(f"instance {task.id!r}: {err}") from None
        await self._close()
        self._commands = 0
        self._gold_applied = False
        self._last_failed = None
        self._tests_seen = {}
        self._git_present = True
        messages = self.opening_messages(self.instance)
        return Opening(observation=messages[-1]["content"], messages=messages, info={"tools": copy.deepcopy(TOOLS)})

    async def _act(self, action: str) -> Transition:
        turn = read_turn(action, id_prefix=f"call_{self.step_index}_")
        if turn.kind == "submit":
            return await self._graded(action, turn, "Submitted.")
        if turn.kind == "problem":
            tr = self._problem(action, turn)
        else:
            tr = await self._command(action, turn)
            if tr.terminated:
                return tr
        if self.step_index >= self.max_turns:  # the base class truncates here: grading decides the outcome
            verdict, patch = await self._grade()
            self._attach(tr, verdict, patch)
        return tr

    def _problem(self, action: str, turn: Turn) -> Transition:
        text = f"Error: {turn.problem}. Nothing was run."
        ns = NextState(
            text=text,
            evaluative=Evaluative(-1.0, (turn.tag,)),
            directive=f"{turn.problem[0].upper()}{turn.problem[1:]}.",
            judge_inputs=self._judge_inputs(action, text),
            action_taken=False,
        )
        return Transition(observation=text, next_state=ns)

    async def _command(self, action: str, turn: Turn) -> Transition:
        command = turn.command
        editing = bool(EDITING.search(command))
        if editing:
            await self._in_box(lambda box: asyncio.to_thread(box.write_file, STAMP, ""))
        result = await self._exec(command, self.command_timeout)
        self._commands += 1
        self._gold_applied = self._gold_applied or (result.ok and command == self._gold_command().strip())
        if submits(result.stdout):
            return await self._graded(action, turn, "Submitted.")
        findings = Findings(repeated_failure=not result.ok and command == self._last_failed)
        self._last_failed = None if result.ok else command
        findings.test_edits = await self._test_edits()
        findings.git_deleted = await self._git_deleted()
        if editing and not result.timed_out:
            check = await self._exec(SYNTAX_CHECK, self.command_timeout)
            findings.syntax_errors = check.stdout.strip()[-1000:]
        signal = command_signal(result, findings, timeout=self.command_timeout, max_chars=self.max_output_chars)
        ns = NextState(
            text=signal.text,
            role="tool",
            evaluative=signal.evaluative,
            directive=signal.directive,
            judge_inputs=self._judge_inputs(action, signal.text),
        )
        self.messages[-1] = _assistant_message(turn, action)
        return Transition(observation=signal.text, next_state=ns, messages=[_reply(turn, signal.text, "bash")])

    async def _graded(self, action: str, turn: Turn, said: str) -> Transition:
        verdict, patch = await self._grade()
        text = f"{said} {_verdict_text(verdict)}"
        ns = NextState(text=text, judge_inputs=self._judge_inputs(action, text))
        tr = Transition(observation=text, next_state=ns, terminated=True)
        self._attach(tr, verdict, patch)
        if turn.call is not None:
            self.messages[-1] = _assistant_message(turn, action)
            tr.messages = [_reply(turn, text, turn.call.name)]
        return tr

    def _attach(self, tr: Transition, verdict: Verdict, patch: str) -> None:
        """Put the grading's outcome, tag and report on the last turn."""
        ok, total = verdict.counts()
        outcome = 1.0 if verdict.resolved else -1.0
        ns = tr.next_state
        tags = (*ns.evaluative.tags, f"tests={ok}/{total}", "resolved" if verdict.resolved else "unresolved")
        score = ns.evaluative.score if ns.role == "tool" else outcome
        directive = ns.directive
        if not verdict.resolved and ns.role != "tool":
            directive = "The issue is not fixed: " + (
                verdict.problem or "reproduce the bug with a small script, fix the code, and rerun it before submitting"
            )
        tr.next_state = dataclasses.replace(
            ns, evaluative=Evaluative(score, tags), directive=directive, outcome=outcome
        )
        tr.reward = outcome
        tr.info["report"] = verdict.to_dict()
        tr.info["patch"] = patch

    # -- grading -----------------------------------------------------------------------------

    async def _grade(self) -> tuple[Verdict, str]:
        """The workspace's patch (empty when nothing ran), graded in a fresh checkout; the agent's sandbox closes."""
        patch = ""
        if self._commands:
            env = {**self._env(), "BASE": str(self.instance["base_commit"])}
            generated = self.prepared.generated_files if self.prepared else ()
            cmd = patch_of([*test_files(self.instance), *generated])
            result = await self._in_box(lambda box: box.arun(cmd, timeout=120.0, env=env))
            if not result.ok:
                raise InfraFailure(f"cannot compute the workspace's patch: {result.stderr.strip()[-500:]}")
            data = await self._in_box(lambda box: asyncio.to_thread(box.read_file, PATCH_FILE))
            patch = data.decode("utf-8", errors="replace")
        await self._close()
        verdict, _ = await self.grade(patch)
        return verdict, patch

    async def grade(self, patch: str) -> tuple[Verdict, str]:
        """Grade ``patch`` for the current instance in a fresh checkout (also used for predictions files)."""
        prepared = await self._prepared()
        options = {**prepared.sandbox_options(self.sandbox_kind, self.instance), **self.sandbox_options}
        options.setdefault("cpu_seconds", max(30, int(self.test_timeout)))
        return await grade_patch(
            self.instance,
            patch,
            lambda: self._open(options),
            env=self._env(),
            timeout=self.test_timeout,
            use_swebench=self.use_swebench,
        )

    # -- the sandbox -------------------------------------------------------------------------

    async def _prepared(self) -> Prepared:
        if self.prepared is None:
            try:
                self.prepared = await asyncio.to_thread(self.workspaces.prepare, self.instance, self.sandbox_kind)
            except OSError as err:
                raise InfraFailure(f"cannot prepare {self.instance['repo']}: {err}") from err
        return self.prepared

    def _env(self) -> dict[str, str]:
        return self.prepared.command_env(self.sandbox_kind) if self.prepared else {}

    async def _open(self, options: Mapping[str, Any]) -> Sandbox:
        """A new sandbox with the repository checked out at ``base_commit``."""
        try:
            box = await asyncio.to_thread(make_sandbox, self.sandbox_kind, **{"network": False, **options})
        except (SandboxError, OSError) as err:
            raise InfraFailure(f"cannot start the sandbox: {err}", StepStatus.SANDBOX_FAILURE) from err
        try:
            await self._checkout(box)
        except BaseException:
            await asyncio.to_thread(box.close)
            raise
        return box

    async def _checkout(self, box: Sandbox) -> None:
        if self.sandbox_kind != "local":
            return
        prepared = await self._prepared()
        result = await box.arun(prepared.checkout(str(self.instance["base_commit"])), timeout=300.0, env=self._env())
        if not result.ok:
            raise InfraFailure(
                f"cannot check out {self.instance['base_commit']}: {result.stderr.strip()[-500:]}",
                StepStatus.SANDBOX_FAILURE,
            )

    async def _in_box(self, work: Any, timeout: float | None = None) -> Any:
        """``await work(sandbox)`` in the episode's sandbox (made and checked out on first use)."""
        if self.box is None:
            prepared = await self._prepared()
            options = {**prepared.sandbox_options(self.sandbox_kind, self.instance), **self.sandbox_options}
            self.box = EpisodeSandbox(self.sandbox_kind, options)
        return await self.box.run(work, timeout=(timeout or self.command_timeout) + 60.0, prepare=self._first_use)

    async def _first_use(self, box: Sandbox) -> None:
        await self._checkout(box)
        for path in test_files(self.instance):
            self._tests_seen[path] = await _read(box, path)

    async def _exec(self, command: str, timeout: float) -> ExecResult:
        return await self._in_box(lambda box: box.arun(command, timeout=timeout, env=self._env()), timeout)

    async def _test_edits(self) -> list[str]:
        changed = []
        for path, before in self._tests_seen.items():
            now = await self._in_box(lambda box, p=path: _read(box, p))
            if now != before:
                changed.append(path)
                self._tests_seen[path] = now
        return changed

    async def _git_deleted(self) -> bool:
        present = await self._in_box(lambda box: _read(box, ".git/HEAD")) is not None
        deleted, self._git_present = self._git_present and not present, present
        return deleted

    async def _close(self) -> None:
        if self.box is not None:
            box, self.box = self.box, None
            await asyncio.to_thread(box.close)
        self.prepared = None

    async def aclose(self) -> None:
        await self._close()

    # -- judge inputs and scripted agents ----------------------------------------------------

    def _judge_inputs(self, action: str, result: str) -> dict[str, Any]:
        """What ``prompts/prm_swe.jinja`` needs: the issue, earlier steps, the action and the report after it."""
        return {
            "task": str(self.instance.get("problem_statement", "")),
            "history": step_history(self.messages[:-1]),
            "action": action,
            "result": result,
        }

    def reference_action(self) -> str | None:
        """Apply the gold patch (one command), then submit."""
        if not self.instance:
            return None
        if not self._gold_applied:
            return tool_call_text("bash", {"command": self._gold_command()})
        return tool_call_text("submit")

    def _gold_command(self) -> str:
        return f"git apply <<'CLAW_GOLD_PATCH'\n{self.instance['patch']}CLAW_GOLD_PATCH"

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """Scripted fixes of the built-in training instances, from real runs (:func:`.demos.demonstrations`)."""
        source = self.workspaces.source
        return demonstrations(
            n,
            seed,
            env_class=type(self),
            sandbox=self.sandbox_kind,
            sandbox_options=self.sandbox_options,
            env_options={"repos": source.spec, "cache_dir": str(source.root)},
        )

    def null_action(self) -> str | None:
        """Submit at once (the empty patch)."""
        return tool_call_text("submit")


async def _read(box: Sandbox, path: str) -> bytes | None:
    """``path`` in the workspace, or ``None`` when it is not there (a local sandbox reads a host file, at once)."""
    try:
        if isinstance(box, LocalSandbox):
            return box.read_file(path)
        return await asyncio.to_thread(box.read_file, path)
    except (OSError, SandboxError, ValueError):
        return None


def _assistant_message(turn: Turn, action: str) -> Message:
    if turn.call is None:
        return {"role": "assistant", "content": action}
    return {"role": "assistant", "content": turn.prose, "tool_calls": [turn.call.to_openai()]}


def _reply(turn: Turn, text: str, name: str) -> Message:
    if turn.call is None:
        return {"role": "user", "content": text}
    return {"role": "tool", "tool_call_id": turn.call.id, "name": name, "content": text}


def _verdict_text(verdict: Verdict) -> str:
    ok, total = verdict.counts()
    if verdict.resolved:
        return f"The issue is resolved: {ok}/{total} graded tests pass."
    failing = [t for part in verdict.tests.values() for t in part.get("failure", [])]
    why = verdict.problem or (f"failing: {', '.join(failing[:5])}" if failing else "no graded test passed")
    return f"The issue is not resolved ({ok}/{total} graded tests pass; {why})."
