"""``claw/Terminal-v0``: do a small job in a Linux shell, one command per turn, then say you are done.

Each turn the model runs ONE command — a ``bash`` tool call (Hermes ``<tool_call>`` or OpenAI ``tool_calls``) or a
fenced ```bash block — or replies in words with no command ("done"): the task's check (exit 0 = solved) then runs
and ends the episode; it also runs when ``max_turns`` (8) turns are used up.

Step signals (``info["next_state"]``):

* Command turn: ``role="tool"``, the output and ``returncode=N``; ``evaluative`` +0.5 for exit 0, 0 when the output
  is cut, -1 for a non-zero exit or a timeout (:mod:`.signals`); ``directive`` quotes the error line.
* Final turn: ``role="environment"``, the check's verdict; ``outcome`` and ``reward`` 1.0 (solved) or 0.0;
  ``evaluative`` +1 if solved, -1 if not (claiming to be done when it is not); tags ``tests=1/1`` or ``tests=0/1``.
* A turn the env cannot act on (a malformed or unknown tool call, two commands, an empty turn, limits passed):
  -1 with a directive, nothing runs, the episode goes on.
* Turn limit: the last turn's next state also carries the check's ``tests=`` tag and ``outcome`` (``reward``
  the same), and ``info["check"]`` says how the check went.

Each episode gets a fresh sandbox (``claw_envs.sandbox``, local bubblewrap or docker); a sandbox that fails is an
infrastructure failure (``info["status"] == "sandbox_failure"``), never the agent's fault.

**Shell.** ``shell="persistent"`` (local default) keeps one bash per episode
(:class:`~claw_envs.sandbox.shell.PersistentShell`); ``"oneshot"`` runs each command in a fresh shell.

**Task folders** (:mod:`.folders`, Harbor or Terminal-Bench 1 layout): the workspace sits at the task's workdir
(``/app``), the hidden tests grade it (:mod:`.grading`); the outcome is the fraction of tests passed (Harbor: the
number in ``reward.txt``), the reward is ``2·outcome − 1``, the final ``evaluative`` +1 when solved and -1 (with a
directive) when the agent declared an unfinished task done; ``info["grading"]`` holds the per-test results. The
agent's time for the episode (``[agent] timeout_sec``) caps its commands; when it is used up the episode ends and
the tests run. The environment is provisioned from the Dockerfile (:mod:`.provision`): ``info["environment"]`` at
reset says how, ``info["approximations"]`` what is only approximated, ``info["refused"]`` what this machine lacks
(its first command is then an infrastructure failure naming it; :meth:`TerminalEnv.provision_system` installs
missing apt packages when asked).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

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
from claw_envs.sandbox import ExecResult, Sandbox, SandboxError
from claw_envs.sandbox.episode import EpisodeSandbox
from claw_envs.sandbox.output import cap_text
from claw_envs.sandbox.shell import PersistentShell, ShellRun
from claw_envs.shell_turns import (
    BASH_TOOL,
    LIMITS,
    MAX_COMMAND_BYTES,
    Turn,
    assistant_message,
    read_turn,
    reply_message,
    report,
    tool_call_text,
)
from claw_envs.tasks import Task, TaskSource, TaskSourceLike
from claw_envs.terminal.demos import demonstrations
from claw_envs.terminal.grading import Verdict, grade_folder, network_line, prepare_folder
from claw_envs.terminal.provision import Environments, Plan, build, install_command, plan
from claw_envs.terminal.system import Provisioned, missing_packages, provision
from claw_envs.terminal.tasks import builtin_tasks, solution_commands, validate
from claw_envs.terminal.venvs import VenvError

DEFAULT_COMMAND_TIMEOUT = 10.0
SYSTEM_PROMPT = """\
You are working in a Linux shell. Your current directory is the task's working directory; only it and \
/tmp can be written, and there is no network.

Run one command per turn, either as a tool call:
<tool_call>{{"name": "bash", "arguments": {{"command": "ls -la"}}}}</tool_call>
or as a fenced block:
```bash
ls -la
```
You will see its output and exit status (each command has a {timeout:g}-second limit). {shell} You have {turns} \
turns.
When the task is done, reply in words with no command; the result is then checked.

Available tools (JSON schema):
{tools}"""

SHELL_NOTES = {
    "persistent": "Commands run one after another in the same shell: cd, variables and background jobs carry over.",
    "oneshot": "Each command runs in a new shell: cd and variables do not carry over, files do.",
}


class TerminalEnv(ClawEnv):
    """Shell tasks checked by a command; see the module docstring for the signals.

    ``tasks`` (a JSONL file, a task folder or a folder of them, see :mod:`.tasks`, or a task source) replaces the
    built-in tasks. ``sandbox``/``sandbox_options`` go to ``claw_envs.sandbox.make_sandbox``; ``shell`` is
    ``"persistent"`` or ``"oneshot"`` (default: persistent on the local backend, one-shot on docker);
    ``command_timeout`` limits each command (default 10 s; unless it is given, a task folder's commands are limited
    by the agent's time for the task alone: its solution script is one long command), ``check_timeout`` the check,
    ``max_output_chars`` what the model sees of an output, ``max_command_bytes`` the command line (a longer one is
    the agent's error).
    """

    default_max_turns = 8
    max_command_bytes: int = MAX_COMMAND_BYTES
    """Longest command line run, in UTF-8 bytes; a longer one is refused (-1), never a sandbox failure."""
    parse_limits = LIMITS
    """JSON depth, turn size and calls read per turn (:class:`~claw_envs.tool_calls.parse.ParseLimits`)."""

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
        sandbox: str = "local",
        sandbox_options: Mapping[str, Any] | None = None,
        command_timeout: float | None = None,
        check_timeout: float = 30.0,
        max_output_chars: int = 2000,
        max_command_bytes: int | None = None,
        shell: Literal["persistent", "oneshot"] | None = None,
    ):
        if shell not in (None, "persistent", "oneshot"):
            raise ValueError(f"shell must be 'persistent' or 'oneshot', got {shell!r}")
        if shell == "persistent" and sandbox != "local":
            raise ValueError(f"shell='persistent' needs the local sandbox; pass shell='oneshot' for {sandbox!r}")
        super().__init__(tasks, split=split, max_turns=max_turns, render_mode=render_mode)
        self.sandbox = EpisodeSandbox(sandbox, sandbox_options)
        self._options = dict(self.sandbox.options)
        self.shell = shell or ("persistent" if sandbox == "local" else "oneshot")
        self._shell: PersistentShell | None = None
        self._plan: Plan | None = None
        self._envs: Environments | None = None
        self._agent_seconds = 0.0
        self.command_timeout = DEFAULT_COMMAND_TIMEOUT if command_timeout is None else command_timeout
        self._timeout_given = command_timeout is not None
        self._transcript: list[str] = []
        self.check_timeout = check_timeout
        self.max_output_chars = max_output_chars
        if max_command_bytes is not None:
            self.max_command_bytes = max_command_bytes
        self._commands = 0

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        return builtin_tasks(split)

    # -- episode -----------------------------------------------------------------------------

    def opening_messages(self, task: Task) -> list[Message]:
        """The system prompt (how to run commands, the tool schema) and the instruction."""
        system = SYSTEM_PROMPT.format(
            timeout=self._command_limit(task),
            shell=SHELL_NOTES[self.shell],
            turns=self.max_turns,
            tools=json.dumps([BASH_TOOL], ensure_ascii=False),
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": str(task.data["instruction"])}]

    async def _begin(self, task: Task) -> Opening:
        problem = validate(task.data)
        if problem:
            raise ValueError(f"task {task.id!r}: {problem}")
        self._close_sandbox()
        self._commands = 0
        self._agent_seconds = 0.0
        self._transcript = []
        at_workdir = "folder" in task.data and self.sandbox.kind == "local"
        self.sandbox.options = {**self._options, **({"workspace": task.data["workdir"]} if at_workdir else {})}
        self._plan = plan(task.data) if at_workdir else None
        self._envs = None
        messages = self.opening_messages(task)
        info: dict[str, Any] = {"tools": [copy.deepcopy(BASH_TOOL)]}
        if self._plan is not None:
            info["environment"] = self._plan.to_info()
            info["approximations"] = list(self._plan.approximations)
            info.update({"refused": self._plan.problem} if self._plan.problem else {})
        return Opening(observation=messages[-1]["content"], messages=messages, info=info)

    async def _act(self, action: str) -> Transition:
        turn = read_turn(
            action,
            id_prefix=f"call_{self.step_index}_",
            limits=self.parse_limits,
            max_command_bytes=self.max_command_bytes,
        )
        if turn.kind == "final":
            return await self._final_turn(action)
        if turn.kind == "problem":
            tr = self._problem_turn(action, turn)
        else:
            tr = await self._command_turn(action, turn)
        if self.step_index >= self.max_turns:  # the base class truncates here: the check decides the outcome
            await self._add_check(tr)
        return tr

    async def _command_turn(self, action: str, turn: Turn) -> Transition:
        timeout = min(self._command_limit(self.task), max(round(self._agent_time_left(), 1), 0.1))
        run = await self._exec_agent(turn.command, timeout)
        self._transcript.append(f"$ {turn.command}\n{run.result.stdout}{run.result.stderr}")
        self._commands += 1
        self._agent_seconds += run.result.duration
        if run.result.timed_out and timeout < self._command_limit(self.task):
            self._agent_seconds = float(self.task.data["agent_timeout"])  # killed at the agent's remaining time
        rep = report(run.result, timeout=timeout, max_chars=self.max_output_chars)
        text, directive = rep.text, rep.directive
        if run.note:
            text = f"{text}\n{run.note}"
            restarted = "The shell was restarted: cd back and set your variables again if you need them."
            directive = f"{directive} {restarted}" if run.result.timed_out else restarted
        ns = NextState(
            text=text,
            role="tool",
            evaluative=rep.evaluative,
            directive=directive,
            judge_inputs=self._judge_inputs(action, text),
        )
        # The base class appended the raw assistant text just before _act; tool calls are stored in OpenAI form.
        self.messages[-1] = assistant_message(turn, action)
        tr = Transition(observation=text, next_state=ns, messages=[reply_message(turn, text)])
        if self._shell is not None:
            tr.info["shell_restarts"] = self._shell.restarts
        if self._agent_time_left() <= 0 and self.step_index < self.max_turns:
            await self._add_check(tr, why="the agent's time for this task is used up")
            tr.terminated = True
        return tr

    def _command_limit(self, task: Task) -> float:
        """Seconds one command may run: ``command_timeout``, or for a task folder (unless it was given) the agent's
        time for the task."""
        if "folder" in task.data and not self._timeout_given and task.data.get("agent_timeout"):
            return float(task.data["agent_timeout"])
        return self.command_timeout

    def _agent_time_left(self) -> float:
        """Seconds the agent may still spend on commands (a task folder's agent timeout; unbounded otherwise)."""
        limit = self.task.data.get("agent_timeout") if self.task else None
        return float("inf") if limit is None else max(float(limit) - self._agent_seconds, 0.0)

    def _problem_turn(self, action: str, turn: Turn) -> Transition:
        text = f"Error: {turn.problem}. Nothing was run."
        ns = NextState(
            text=text,
            role="environment",
            evaluative=Evaluative(-1.0, (turn.tag,)),
            directive=f"{turn.problem[0].upper()}{turn.problem[1:]}.",
            judge_inputs=self._judge_inputs(action, text),
            action_taken=False,
        )
        return Transition(observation=text, next_state=ns)

    async def _final_turn(self, action: str) -> Transition:
        verdict = await self._verdict()
        if verdict.solved:
            text, directive = verdict.text, None
        else:
            text = verdict.text
            directive = (
                "The task was not done when you said so: look at the result (cat the file, run the script) "
                "and compare it with the instruction before saying you are done."
            )
        ns = NextState(
            text=text,
            role="environment",
            evaluative=Evaluative(verdict.score, (verdict.tag,)),
            directive=directive,
            outcome=verdict.outcome,
            judge_inputs=self._judge_inputs(action, text),
            action_taken=False,  # saying "done" runs nothing
        )
        return Transition(observation=text, next_state=ns, reward=verdict.reward, terminated=True, info=verdict.info)

    async def _add_check(self, tr: Transition, why: str = "turn limit reached") -> None:
        """Record the check's verdict on the last turn's next state (the turn limit ends the episode)."""
        verdict = await self._verdict()
        ns = tr.next_state
        evaluative = Evaluative(ns.evaluative.score, (*ns.evaluative.tags, verdict.tag))
        tr.next_state = dataclasses.replace(ns, evaluative=evaluative, outcome=verdict.outcome)
        tr.info.update(verdict.info)
        tr.info["check"] = f"{why}; check {'passed' if verdict.solved else 'failed'}"
        tr.reward = verdict.reward

    async def _verdict(self) -> Verdict:
        """End the agent's processes, then grade the task: its check command, or a task folder's tests."""
        try:
            if self._shell is not None:
                await asyncio.to_thread(self._shell.close)
            if "folder" in self.task.data:
                await self._provisioned()
                python = self._envs.python(tests=True) if self._envs else "python3"
                grade = await self.sandbox.run(
                    lambda box: grade_folder(
                        box,
                        dict(self.task.data),
                        timeout=self.check_timeout_for(),
                        python=python,
                        env=self._command_env(tests=True),
                        transcript="\n".join(self._transcript),
                    ),
                    timeout=self.check_timeout_for() + 60.0,
                    what="grading: ",
                    prepare=self._prepare,
                )
                verdict = Verdict.of_grade(grade)
                if not verdict.solved and (line := network_line("\n".join(self._transcript))):
                    verdict.info["diagnosis"] = f"a command of the episode needed the network ({line})"
                return verdict
            solved, detail = await self._check()
            return Verdict.of_check(solved, detail)
        finally:
            self._close_sandbox()

    def check_timeout_for(self) -> float:
        """Seconds the grading may take: a task folder's verifier timeout, else ``check_timeout``."""
        return float(self.task.data.get("verifier_timeout") or self.check_timeout)

    async def _check(self) -> tuple[bool, str]:
        """Whether the task's check passes, and what it printed (capped)."""
        result = await self._exec(str(self.task.data["check"]), self.check_timeout)
        printed = (result.stdout + result.stderr).strip()
        if result.timed_out:
            printed = f"the check did not finish within {self.check_timeout:g} s"
        return result.ok, cap_text(printed, self.max_output_chars // 2)[0]

    # -- the sandbox -------------------------------------------------------------------------

    async def _provisioned(self) -> None:
        """A task folder's environment, before its first sandbox: refused when this machine lacks what it needs,
        else its virtualenvs built (or taken from the cache) and shown read-only inside (:mod:`.provision`)."""
        if self._plan is None or self._envs is not None:
            return
        if self._plan.problem:
            raise InfraFailure(self._plan.problem, StepStatus.SANDBOX_FAILURE)
        try:
            self._envs = await asyncio.to_thread(build, self._plan)
        except VenvError as err:
            raise InfraFailure(f"cannot build the task's virtualenv: {err}", StepStatus.SANDBOX_FAILURE) from err
        binds = [*self.sandbox.options.get("binds_ro", ()), *self._envs.binds()]
        self.sandbox.options = {**self.sandbox.options, "binds_ro": binds}

    def _command_env(self, *, tests: bool = False) -> dict[str, str]:
        """The environment of the task's commands: its ``ENV`` (over the virtualenv's, for a task folder)."""
        data_env = dict(self.task.data.get("env") or {})
        return self._envs.command_env(data_env, tests=tests) if self._envs else data_env

    async def _exec(self, command: str, timeout: float) -> ExecResult:
        await self._provisioned()
        return await self.sandbox.run(
            lambda box: box.arun(command, timeout=timeout, env=self._command_env()),
            timeout=timeout + 30.0,
            prepare=self._prepare,
        )

    async def _exec_agent(self, command: str, timeout: float) -> ShellRun:
        """An agent's command: in the episode's persistent shell, or one-shot."""
        if self.shell == "oneshot":
            return ShellRun(await self._exec(command, timeout))

        async def in_shell(box: Sandbox) -> ShellRun:
            if self._shell is None or self._shell.sandbox is not box:
                limit = getattr(box, "output_limit", 65536)
                self._shell = PersistentShell(box, env=self._command_env(), output_limit=limit)
            return await self._shell.arun(command, timeout)

        await self._provisioned()
        return await self.sandbox.run(in_shell, timeout=timeout + 30.0, prepare=self._prepare)

    async def _prepare(self, sandbox: Sandbox) -> None:
        """Write the task's files and run its setup in a new sandbox's working directory."""
        if "folder" in self.task.data:
            if sandbox.isolation != "bwrap":
                raise InfraFailure(
                    f"task folders run on the local backend under bubblewrap (their tests use absolute paths such as "
                    f"{self.task.data['workdir']}; the docker backend would need the task's image built); this "
                    f"sandbox runs {sandbox.isolation}",
                    StepStatus.SANDBOX_FAILURE,
                )
            return await prepare_folder(sandbox, dict(self.task.data), self.check_timeout, self._command_env())
        try:
            for path, content in dict(self.task.data.get("files", {})).items():
                await asyncio.to_thread(sandbox.write_file, path, content)
            setup = self.task.data.get("setup")
            done = await sandbox.arun(setup, timeout=self.check_timeout) if setup else None
        except (SandboxError, OSError, ValueError) as err:
            raise InfraFailure(f"cannot prepare the task's files: {err}", StepStatus.SANDBOX_FAILURE) from err
        if done is not None and not done.ok:
            raise InfraFailure(f"the task's setup failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")

    def _close_sandbox(self) -> None:
        """End the persistent shell and the sandbox (nothing of the episode is left running)."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        self.sandbox.close()

    async def aclose(self) -> None:
        self._close_sandbox()

    # -- judge inputs ------------------------------------------------------------------------

    def _judge_inputs(self, action: str, result: str) -> dict[str, Any]:
        """What ``prompts/prm_terminal.jinja`` needs: task, history (earlier steps), action, result."""
        return {
            "task": str(self.task.data["instruction"]) if self.task else "",
            "history": step_history(self.messages[:-1]),
            "action": action,
            "result": result,
        }

    # -- scripted agents and bootstrapping ---------------------------------------------------

    def reference_action(self) -> str | None:
        """The task's next solution command (as a bash tool call; a task folder's solution script is one command),
        then a final message."""
        if self.task is None:
            return None
        solution = solution_commands(self.task.data)
        if self._commands < len(solution):
            return tool_call_text(solution[self._commands])
        return "The task is done."

    def null_action(self) -> str | None:
        """Declare the task done without running anything."""
        return "The task is done."

    def has_reference(self, task_id: str) -> bool:
        """Whether the task has a solution for :meth:`reference_action` to play (many task folders ship none)."""
        return bool(solution_commands(self.tasks.get(task_id).data))

    def provision_system(self, task_ids: Iterable[str], *, install: bool = False) -> Provisioned:
        """The apt packages these tasks need and this machine lacks, installed when ``install`` (:mod:`.system`)."""
        missing = missing_packages(dict(self.tasks.get(t).data) for t in task_ids)
        return provision(missing) if install else Provisioned(missing, command=install_command(missing))

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """Solution turns on built-in training tasks, from real runs (:func:`.demos.demonstrations`)."""
        recorder = {"env_class": type(self), "sandbox": self.sandbox.kind, "sandbox_options": self._options}
        return demonstrations(n, seed, opening=self.opening_messages, **recorder)
