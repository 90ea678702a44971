"""``claw/ToolCall-v0``: solve a math problem with a sandboxed Python tool, then give a boxed answer.

Each turn the model either calls tools (one or more ``<tool_call>`` blocks, an OpenAI ``tool_calls``
message, or a fenced ```python block, read as one call of the python tool), or answers with ``\\boxed{...}``
(or, with no box, a last line such as "Final answer: 42"; the tag ``answer_form`` says which was graded) and no
tool call (a turn with both runs the calls and ignores
the box, since the model has not seen their results yet). The episode ends at the answer or after
``max_turns`` (16) turns.

Step signals (``info["next_state"]``):

* Tool turn: the next state is the tools' output (``role="tool"``). ``evaluative`` is the lowest score
  over the turn's calls: **-1** for a call that could not be read (bad JSON, unclosed tag, unknown tool,
  wrong argument types) or whose program raised, timed out or was killed; **0** for one that ran but
  printed nothing or so much that it was cut; **+1** when it ran and printed a result. ``directive`` is the
  parse error or the traceback tail.
* Answer turn: graded by :mod:`.grading` (math-verify with a time limit, normalised-string fallback).
  ``outcome`` is +1 (right) or -1 (wrong); ``evaluative`` is +1 if right, 0 if wrong (the -1 lives in the
  outcome). ``reward`` is the outcome plus ``tool_use_bonus`` when at least one tool call in the episode
  ran without error (shaping, 0 by default).
* A turn with neither: a next state asking for a tool call or a boxed answer, ``evaluative`` 0.
* Turn limit: ``outcome`` and ``reward`` -1.
* Bounds (the agent's error when overrun, never an exception): a turn holds at most ``max_calls_per_turn``
  (8) tool calls, or none is run; the calls of one turn share ``turn_time_budget`` seconds (2 × the per-call
  timeout), and a call past it is not run; tool-call JSON nests at most 32 deep and a turn is at most
  2**20 characters (:class:`~claw_envs.tool_calls.parse.ParseLimits`); a boxed answer over
  ``max_answer_chars`` (1000) is not graded. Each is ``evaluative`` -1 with a directive naming the limit.

``info["messages"]`` is OpenAI-format: the assistant turn holds ``content`` (its text outside the
answerable calls) and ``tool_calls`` (arguments as a JSON string); each call is answered by a ``tool``
message with its ``tool_call_id``; calls too broken to have an id are answered in one ``user`` message.
Code runs in a fresh sandbox per episode (``claw_envs.sandbox``); a sandbox failure is an
infrastructure failure (``info["status"] == "sandbox_failure"``), never the agent's fault.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from claw_envs.core import ClawEnv, Evaluative, Message, NextState, Opening, Transition, bad_action
from claw_envs.messages import step_history
from claw_envs.sandbox.episode import EpisodeSandbox
from claw_envs.tasks import Task, TaskSource, TaskSourceLike
from claw_envs.tool_calls.parse import (
    MAX_ACTION_CHARS,
    MAX_JSON_DEPTH,
    TURN_ERRORS,
    ParsedTurn,
    ParseLimits,
    ToolCall,
    ToolCallError,
    parse_action,
)
from claw_envs.toolcall.boxed import fenced_python, final_answer_line, last_boxed
from claw_envs.toolcall.signals import MAX_ANSWER_CHARS, MathVerifier, grade_answer
from claw_envs.toolcall.tasks import builtin_tasks, make_arithmetic
from claw_envs.toolcall.tools import TOOLS, ToolOutput, run_python

SYSTEM_PROMPT = """\
You are solving a math problem and may run Python to do the computing.

To run a program, write a tool call:
<tool_call>{{"name": "python", "arguments": {{"code": "print(2**64 - 1)"}}}}</tool_call>
The call must be valid JSON (write newlines inside the code as \\n). Each call runs in a new Python 3 \
process with no network and a {timeout:g}-second limit, and you see only what it prints. You may make \
up to {calls} calls in a turn ({budget:g} seconds in all) and use up to {turns} turns.

A fenced ```python block is run the same way as a call. When you are sure of the result, reply without any \
tool call and put the final answer in \\boxed{{}}, for example \\boxed{{42}} (a last line "Final answer: 42" is \
read too when there is no box).

Available tools (JSON schema):
{tools}"""

SYSTEM_PROMPT_NO_TOOLS = """\
You are solving a math problem without tools. Work it out step by step, then put the final answer in \\boxed{}, \
for example \\boxed{42} (a last line "Final answer: 42" is read too when there is no box)."""

NUDGE_NO_TOOLS = "I found no final answer. Give your final answer as \\boxed{...}."

NUDGE = (
    "I found no tool call and no final answer. Either run Python with "
    '<tool_call>{"name": "python", "arguments": {"code": "..."}}</tool_call> '
    "(or a fenced ```python block), or give your final answer as \\boxed{...}."
)

SCHEMAS = {name: tool.parameters for name, tool in TOOLS.items()}
MIN_CALL_TIME = 0.05  # seconds of the turn's tool-time budget a call needs left to be started at all
TOOL_SPECS = [tool.spec() for tool in TOOLS.values()]


class ToolCallEnv(ClawEnv):
    """Math with a sandboxed Python tool; see the module docstring for the signals.

    ``tasks`` names the tasks (``aime2024``, ``gsm8k``, ``dapo-math``, ``builtin``, a JSONL/parquet path, see
    :mod:`.tasks`, or a task source); by default the built-in procedural set. ``sandbox``/``sandbox_options``
    go to ``claw_envs.sandbox.make_sandbox``; ``tool_timeout`` limits each call, ``max_output_chars`` what
    the model sees of its output. ``max_calls_per_turn`` and ``turn_time_budget`` (default ``2 * tool_timeout``)
    bound one turn's tool use; the class attributes below bound what is read. ``tools=False`` poses the same
    problems with no tool (the prompt asks for a worked, boxed answer; a tool call is refused, -1): the model's
    accuracy without the tool, for comparison.
    """

    default_max_turns = 16
    max_calls_per_turn: int = 8
    """Most tool calls in one turn; a turn with more is refused whole (-1), nothing runs."""
    max_json_depth: int = MAX_JSON_DEPTH
    """Deepest JSON nesting read in a tool call; deeper is the agent's error (-1), never a ``RecursionError``."""
    max_action_chars: int = MAX_ACTION_CHARS
    """Longest turn read, in characters; a longer one is refused (-1)."""
    max_answer_chars: int = MAX_ANSWER_CHARS
    """Longest boxed answer graded, in characters; a longer one is refused (-1) and the episode goes on."""
    turn_budget_factor: float = 2.0
    """Default ``turn_time_budget`` as a multiple of ``tool_timeout``."""

    def __init__(
        self,
        tasks: TaskSourceLike = None,
        *,
        split: str = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
        sandbox: str = "local",
        sandbox_options: Mapping[str, Any] | None = None,
        tool_timeout: float = 10.0,
        max_output_chars: int = 2000,
        tool_use_bonus: float = 0.0,
        verifier: MathVerifier | None = None,
        max_calls_per_turn: int | None = None,
        turn_time_budget: float | None = None,
        tools: bool = True,
    ):
        super().__init__(tasks, split=split, max_turns=max_turns, render_mode=render_mode)
        self.sandbox = EpisodeSandbox(sandbox, sandbox_options)
        self.tool_timeout = tool_timeout
        self.max_output_chars = max_output_chars
        self.tool_use_bonus = tool_use_bonus
        self.verifier = verifier
        if max_calls_per_turn is not None:
            self.max_calls_per_turn = max_calls_per_turn
        self.turn_time_budget = (
            turn_time_budget if turn_time_budget is not None else self.turn_budget_factor * tool_timeout
        )
        self.tools = tools
        self._clean_calls = 0
        self._answer_form = "boxed"

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskSource:
        return builtin_tasks(split)

    # -- episode -----------------------------------------------------------------------------

    def opening_messages(self, task: Task) -> list[Message]:
        """The system prompt (tool instructions and schemas, or none with ``tools=False``) and the problem."""
        if not self.tools:
            return [
                {"role": "system", "content": SYSTEM_PROMPT_NO_TOOLS},
                {"role": "user", "content": str(task.data["question"])},
            ]
        tools = json.dumps(TOOL_SPECS, ensure_ascii=False)
        system = SYSTEM_PROMPT.format(
            timeout=self.tool_timeout,
            calls=self.max_calls_per_turn,
            budget=self.turn_time_budget,
            turns=self.max_turns,
            tools=tools,
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": str(task.data["question"])}]

    async def _begin(self, task: Task) -> Opening:
        self.sandbox.close()
        self._clean_calls = 0
        messages = self.opening_messages(task)
        info = {"tools": copy.deepcopy(TOOL_SPECS) if self.tools else []}
        return Opening(observation=messages[-1]["content"], messages=messages, info=info)

    @property
    def parse_limits(self) -> ParseLimits:
        """What the parser may read of one turn (from the class attributes)."""
        return ParseLimits(
            max_depth=self.max_json_depth, max_chars=self.max_action_chars, max_calls=self.max_calls_per_turn
        )

    async def _act(self, action: str) -> Transition:
        parsed = parse_action(action, SCHEMAS, id_prefix=f"call_{self.step_index}_", limits=self.parse_limits)
        answer = None if parsed.has_tool_calls else last_boxed(parsed.text)
        code = None if parsed.has_tool_calls or answer else fenced_python(parsed.text)
        if code is not None:  # a fenced python block is a call of the python tool
            call = ToolCall(f"call_{self.step_index}_0", "python", {"code": code}, raw=code)
            parsed = ParsedTurn(text=parsed.text, items=(call,), format="fenced")
        elif not parsed.has_tool_calls and not answer and (answer := final_answer_line(parsed.text)):
            self._answer_form = "final_answer_line"
        if parsed.has_tool_calls and not self.tools:
            tr = self._refuse(
                action,
                "Error: there are no tools in this episode.",
                "Work the problem out in writing and give the final answer in \\boxed{}.",
                "tool_error=no_tools",
            )
        elif parsed.has_tool_calls:
            tr = await self._tool_turn(action, parsed)
        elif answer and len(answer) > self.max_answer_chars:
            tr = self._refuse(
                action,
                f"Error: the boxed answer is {len(answer):,} characters long and answers over "
                f"{self.max_answer_chars:,} are not graded.",
                f"Box only the final value (at most {self.max_answer_chars:,} characters), e.g. \\boxed{{42}}.",
                "answer_too_long",
            )
        elif answer:
            tr = await self._answer_turn(action, answer)
        else:  # neither a tool call nor an answer: the agent's error, like any malformed action
            directive = (
                "Call the python tool in a <tool_call> block or a closed ```python block, or give the final answer "
                "in \\boxed{}."
                if self.tools
                else "Give the final answer in \\boxed{}."
            )
            nudge = NUDGE if self.tools else NUDGE_NO_TOOLS
            tr = Transition(
                observation=nudge,
                next_state=bad_action(nudge, directive, tags=("no_action",), **self._judge_inputs(action, nudge)),
            )
        if tr.terminated or self.step_index >= self.max_turns:
            self.sandbox.close()
            if not tr.terminated:  # the base class truncates here and records outcome -1
                tr.reward = -1.0
        return tr

    def _refuse(self, action: str, text: str, directive: str, tag: str) -> Transition:
        """A turn that is not carried out (the agent's error): -1, ``directive`` says what to do instead."""
        ns = bad_action(text, directive, tags=(tag,), **self._judge_inputs(action, text))
        return Transition(observation=text, next_state=ns)

    async def _tool_turn(self, action: str, parsed: ParsedTurn) -> Transition:
        if len(parsed.items) == 1 and isinstance(item := parsed.items[0], ToolCallError) and item.kind in TURN_ERRORS:
            return self._refuse(
                action,
                f"Error: {item.message}.",
                f"{item.message[0].upper()}{item.message[1:]}.",
                f"tool_error={item.kind}",
            )
        results: list[tuple[ToolCall | ToolCallError, ToolOutput]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.turn_time_budget
        for item in parsed.items:
            if isinstance(item, ToolCall):
                left = deadline - loop.time()
                if left < MIN_CALL_TIME:
                    out = self._over_budget(None)
                else:
                    out = await self._run_call(item, min(self.tool_timeout, left))
                    if "timeout" in out.tags and left < self.tool_timeout:
                        out = self._over_budget(out)
                if out.score > -1:
                    self._clean_calls += 1
            else:
                out = ToolOutput(
                    f"Error: {item.message}", -1.0, (f"tool_error={item.kind}",), f"Fix the tool call: {item.message}"
                )
            results.append((item, out))
        if len(results) == 1:
            text = results[0][1].text
        else:
            text = "\n\n".join(f"[call {i + 1}: {_label(item)}]\n{out.text}" for i, (item, out) in enumerate(results))
        tags = [f"calls={len(results)}"]
        for _, out in results:
            tags += [t for t in out.tags if t not in tags]
        directives = [d for _, out in results if (d := out.directive)]
        answered = [(item, out) for item, out in results if _call_id(item) is not None]
        ns = NextState(
            text=text,
            role="tool" if answered else "environment",
            evaluative=Evaluative(min(out.score for _, out in results), tuple(tags)),
            directive="\n".join(directives) or None,
            judge_inputs=self._judge_inputs(action, text),
            action_taken=any(isinstance(item, ToolCall) for item, _ in results),
        )
        return Transition(observation=text, next_state=ns, messages=self._tool_messages(action, parsed, results))

    async def _answer_turn(self, action: str, answer: str) -> Transition:
        grade = await asyncio.to_thread(grade_answer, answer, str(self.task.data["answer"]), self.verifier)
        form, self._answer_form = self._answer_form, "boxed"
        tags = (f"answer={'right' if grade.correct else 'wrong'}", f"graded_by={grade.method}", f"answer_form={form}")
        if grade.correct:
            text, directive = f"The final answer {answer} is correct.", None
        else:
            text = f"The final answer {answer} is wrong."
            directive = "The boxed answer is not right: check each step with the python tool before answering."
        ns = NextState(
            text=text,
            role="environment",
            evaluative=Evaluative(1.0 if grade.correct else 0.0, tags),
            directive=directive,
            outcome=grade.outcome,
            judge_inputs=self._judge_inputs(action, text),
        )
        reward = grade.outcome + (self.tool_use_bonus if self._clean_calls else 0.0)
        return Transition(observation=text, next_state=ns, reward=reward, terminated=True)

    def _final_outcome(self) -> float | None:
        return -1.0

    # -- the tool ----------------------------------------------------------------------------

    async def _run_call(self, call: ToolCall, timeout: float | None = None) -> ToolOutput:
        code = call.arguments["code"]
        limit = self.tool_timeout if timeout is None else timeout
        return await self.sandbox.run(
            lambda box: run_python(box, code, timeout=limit, max_chars=self.max_output_chars),
            timeout=limit + 30.0,
            what="python tool: ",
        )

    def _over_budget(self, ran: ToolOutput | None) -> ToolOutput:
        """A call stopped (``ran``) or not started (``None``) because the turn's tool time was used up."""
        budget = f"the {self.turn_time_budget:g}-second tool-time budget of this turn"
        head = f"{ran.text}\n" if ran is not None and ran.text else ""
        said = "was stopped when it ran out" if ran is not None else "was not run"
        return ToolOutput(
            f"{head}Error: this call {said}: the calls of one turn share {budget}.",
            -1.0,
            ("turn_time_budget",),
            f"The calls of one turn may run {self.turn_time_budget:g} s in all: make fewer, faster calls "
            "(one program can compute several things) and avoid sleeping or waiting.",
        )

    async def aclose(self) -> None:
        self.sandbox.close()

    # -- messages and judge inputs ----------------------------------------------------------

    def _tool_messages(
        self, action: str, parsed: ParsedTurn, results: list[tuple[ToolCall | ToolCallError, ToolOutput]]
    ) -> list[Message]:
        """Rewrite the assistant turn in OpenAI form and answer each call (see the module docstring)."""
        entries = [e for item, _ in results if (e := item.to_openai()) is not None]
        if entries:
            spans = [item.span for item, _ in results if item.span is not None and _call_id(item) is not None]
            content = _cut(action, spans).strip() if parsed.format == "hermes" else parsed.text
            # The base class appended the raw assistant text just before _act; store it in OpenAI form.
            self.messages[-1] = {"role": "assistant", "content": content, "tool_calls": entries}
        messages: list[Message] = [
            {"role": "tool", "tool_call_id": cid, "name": _label(item), "content": out.text}
            for item, out in results
            if (cid := _call_id(item)) is not None
        ]
        unreadable = [out.text for item, out in results if _call_id(item) is None]
        if unreadable:
            messages.append({"role": "user", "content": "\n".join(unreadable)})
        return messages

    def _judge_inputs(self, action: str, result: str) -> dict[str, Any]:
        return {
            "task": str(self.task.data["question"]) if self.task else "",
            "history": step_history(self.messages[:-1]),
            "action": action,
            "result": result,
        }

    # -- scripted agents and bootstrapping ---------------------------------------------------

    def reference_action(self) -> str | None:
        """Run the task's program if it has one and the tool has not run cleanly yet; else box the answer."""
        if self.task is None:
            return None
        code = self.task.data.get("code")
        if code and not self._clean_calls:
            return tool_call_text(code)
        answer = self.task.data["answer"]
        return f"The computation gives {answer}, so the answer is \\boxed{{{answer}}}."

    def demonstrations(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """Tool-call turns and final-answer turns (alternating) on built-in training problems.

        The tool's reply in an answer turn's history is what the task's program prints (its answer), so no
        sandbox is needed.
        """
        rng = np.random.default_rng(seed)
        seeds = builtin_tasks("train").seeds
        demos = []
        for i in range(n):
            data = make_arithmetic(int(seeds[int(rng.integers(len(seeds)))]))
            messages = self.opening_messages(Task("demo", "train", data))
            call = tool_call_text(data["code"])
            if i % 2 == 0:
                demos.append({"messages": messages, "completion": call})
                continue
            entry = ToolCall("call_1_0", "python", {"code": data["code"]}).to_openai()
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [entry]},
                {"role": "tool", "tool_call_id": "call_1_0", "name": "python", "content": data["answer"]},
            ]
            final = f"The program printed {data['answer']}, so the answer is \\boxed{{{data['answer']}}}."
            demos.append({"messages": messages, "completion": final})
        return demos


def tool_call_text(code: str) -> str:
    """A Hermes-format call of the python tool on ``code``."""
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def _call_id(item: ToolCall | ToolCallError) -> str | None:
    if isinstance(item, ToolCall):
        return item.id
    return item.call_id if item.answerable else None


def _label(item: ToolCall | ToolCallError) -> str:
    return item.name or "unreadable call"


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in sorted(spans):
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out)
