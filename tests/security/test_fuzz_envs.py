"""Property-based fuzzing (hypothesis) of every registered env's ``step()``.

Every id in ``claw_envs.env_ids()`` is fuzzed, so a new or plugin family gets this for free. The actions are
what an unlucky or hostile model writes: junk text with any Unicode (lone surrogates and NULs included),
tool calls in the Hermes and OpenAI formats with random, deeply nested or huge JSON, hundreds of calls in one
turn, enormous numbers in ``\\boxed{}``, fenced code blocks (closed, unclosed, several), and very long strings
(past the action space's 2**20 characters). For each action:

* ``step()`` returns (no exception) within the env's own per-turn time budget plus slack;
* the step is not blamed on the infrastructure (``info["status"] == "ok"``): bad agent output is the agent's;
* the next state is well formed (a ``NextState``, ``evaluative`` in [-1, 1], text observation);
* a malformed tool call (nesting past the depth limit, more calls than a turn may hold, a turn over the size
  limit) in a family that offers tools gets ``evaluative`` -1 and a directive.

The run is derandomized (the same actions every time, so CI is reproducible) and sized so that each env sees
at least ``MIN_ACTIONS`` actions: ``EXAMPLES`` hypothesis examples of ``ACTIONS_PER_EXAMPLE`` steps each (an
episode that ends is reset and the remaining actions go on in a new one). An env whose reset is slow (a browser
context, a repository checkout) gets fewer, longer examples — as many as ``RESET_BUDGET_S`` of resets allow, at
least ``MIN_EXAMPLES`` — and a turn limit that does not end its episodes every few steps; it still sees
``MIN_ACTIONS`` actions. ``CLAW_FUZZ_EXAMPLES`` sets the number of examples (more for a deeper local run, fewer
for a quick look); ``CLAW_FUZZ_RANDOM=1`` draws new actions each run instead (exploration; a failure prints the
example to keep as a regression test).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import claw_envs
from claw_envs.core import MAX_TEXT_LENGTH, NextState

ACTIONS_PER_EXAMPLE = 8
MIN_ACTIONS = 2000
EXAMPLES = int(os.environ.get("CLAW_FUZZ_EXAMPLES", -(-MIN_ACTIONS // ACTIONS_PER_EXAMPLE)))
RESET_BUDGET_S = 20.0  # seconds of resets an env with a slow reset may spend on example starts
MIN_EXAMPLES = 20
LONG_EPISODES = 10_000  # the turn limit of an env with a slow reset
SLACK_S = 15.0  # sandbox start, math-verify worker start, a loaded CI machine
REPORT: dict[str, dict[str, Any]] = {}

# -- strategies ------------------------------------------------------------------------------

NASTY = ["\ud800", "\udfff", "\x00", "\u202e", "\ufeff", "\U0001f600", "\r", "\t", "\\", '"', "{", "}", "`"]
any_char = st.one_of(st.characters(exclude_categories=()), st.sampled_from(NASTY))
junk = st.text(any_char, max_size=200)
words = st.text(st.characters(codec="utf-8"), max_size=60)

SHELL = [
    "ls -la",
    "echo hi",
    "cat no-such-file",
    "true",
    "false",
    "exit 3",
    "printf '%s\\n' a b c",
    "seq 1 100000",
    "yes | head -c 300000",
    "python3 -c 'print(6*7)'",
    "for i in 1 2 3; do echo $i; done",
    "echo hi > out.txt && cat out.txt",
    "cd /; ls",
    "kill -9 $$",
    "read x",
    "sleep 0.2",
]
PYTHON = [
    "print(1)",
    "1/0",
    "import sys; sys.exit(2)",
    "print('x' * 100000)",
    "input()",
    "import os; os.kill(os.getpid(), 9)",
    "print('\\ud800')",
    "x = [[[[]]]]; print(x)",
    "import time; time.sleep(0.2); print('slept')",
    "print(2**10000 % 97)",
    "raise SystemExit('bye')",
    "",
]
code = st.one_of(st.sampled_from(SHELL + PYTHON), junk)


def _json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        junk,
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(junk, inner, max_size=4)),
        max_leaves=max_leaves,
    )


@st.composite
def arguments(draw: st.DrawFn) -> Any:
    key = draw(st.sampled_from(["code", "command", "cmd", "x"]))
    value = draw(st.one_of(code, _json_values()))
    args: Any = {key: value} if draw(st.booleans()) else draw(_json_values())
    return json.dumps(args) if draw(st.integers(0, 3)) == 0 else args


tool_name = st.one_of(st.sampled_from(["python", "bash"]), junk)


@st.composite
def hermes_call(draw: st.DrawFn) -> str:
    body: Any = {"name": draw(tool_name), "arguments": draw(arguments())}
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    mangle = draw(st.integers(0, 5))
    if mangle == 0:  # cut short
        text = text[: draw(st.integers(0, len(text)))]
    elif mangle == 1:
        text = draw(_json_values()).__repr__()
    return f"<tool_call>{text}</tool_call>" if draw(st.integers(0, 6)) else f"<tool_call>{text}"


@st.composite
def nested_json_call(draw: st.DrawFn) -> str:
    # near the limit; past json's recursion limit but short enough for text-only readers; anything
    depth = draw(st.one_of(st.integers(0, 40), st.integers(900, 1900), st.integers(0, 100_000)))
    kind = draw(st.sampled_from(["list", "dict", "args", "openai_args", "whole"]))
    if kind == "list":
        body = "[" * depth + "]" * depth
    elif kind == "dict":
        body = '{"a":' * depth + "1" + "}" * depth
    else:
        inner = "[" * depth + "]" * depth
        if kind == "args":
            body = '{"name": "python", "arguments": {"code": ' + inner + "}}"
        else:
            call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": inner}}
            message = json.dumps({"role": "assistant", "content": None, "tool_calls": [call]})
            return message if kind == "openai_args" else '{"tool_calls": ' + "[" * depth + "]" * depth + "}"
    if draw(st.integers(0, 3)) == 0:
        return f"```json\n{body}\n```"
    return f"<tool_call>{body}</tool_call>"


@st.composite
def openai_message(draw: st.DrawFn) -> str:
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {"id": junk, "type": st.just("function"), "function": st.fixed_dictionaries({"name": tool_name})},
                optional={"arguments": arguments()},
            ),
            max_size=12,
        )
    )
    for c in calls:
        if "arguments" in c:
            c["function"]["arguments"] = c.pop("arguments")
    message: Any = {"role": "assistant", "content": draw(st.one_of(st.none(), words)), "tool_calls": calls}
    return json.dumps(message if draw(st.booleans()) else calls)


@st.composite
def many_calls(draw: st.DrawFn) -> str:
    n = draw(st.one_of(st.integers(0, 12), st.integers(0, 600)))
    name = draw(st.sampled_from(["python", "bash"]))
    key = "code" if name == "python" else "command"
    call = {"name": name, "arguments": {key: "print(1)" if name == "python" else "true"}}
    one = f"<tool_call>{json.dumps(call)}</tool_call>"
    return draw(st.sampled_from(["", "\n", " and "])).join([one] * n)


@st.composite
def boxed(draw: st.DrawFn) -> str:
    digits = draw(st.one_of(st.integers(1, 20), st.integers(1, 10_000)))
    number = draw(st.sampled_from(["9", "1234567890", "0"])) * digits
    inner = draw(
        st.one_of(
            st.just(number),
            st.just(f"-{number}.{number}"),
            st.just(f"\\frac{{{number}}}{{{number[:5] or 1}}}"),
            words,
            junk,
            st.sampled_from(["42", "\\sqrt{2}", "1/0", "x^{2}", "\\infty", "10\\%", "{", "}"]),
        )
    )
    form = draw(st.integers(0, 4))
    if form == 0:
        return "\\boxed{" * draw(st.integers(1, 5000))  # unclosed, many
    if form == 1:
        return "\\boxed{" * 3 + inner + "}" * draw(st.integers(0, 4))
    return f"{draw(words)} so the answer is \\boxed{{{inner}}}"


@st.composite
def fenced(draw: st.DrawFn) -> str:
    lang = draw(st.sampled_from(["bash", "sh", "shell", "BASH", "python", "", "bash "]))
    blocks = draw(st.integers(1, 3))
    text = "".join(f"```{lang}\n{draw(code)}\n```\n" for _ in range(blocks))
    if draw(st.integers(0, 4)) == 0:
        text = text[: text.rfind("```")]  # unclosed
    return text


@st.composite
def long_string(draw: st.DrawFn) -> str:
    unit = draw(
        st.sampled_from(["a", "word ", "<tool_call>", "</tool_call>", "```bash\n", "\\boxed{", "{", "[", "\ud800"])
    )
    n = draw(st.one_of(st.integers(0, 5000), st.integers(0, MAX_TEXT_LENGTH // len(unit) + 50)))
    return unit * n


@st.composite
def runnable(draw: st.DrawFn) -> str:
    """One well-formed call of ``python`` or ``bash`` (or a lone ```bash block): what reaches a sandbox."""
    form = draw(st.sampled_from(["python", "bash", "fenced"]))
    if form == "fenced":
        return f"```bash\n{draw(st.sampled_from(SHELL))}\n```"
    key = "code" if form == "python" else "command"
    value = draw(st.one_of(st.sampled_from(PYTHON if form == "python" else SHELL), words))
    prose = draw(st.sampled_from(["", "Let me check.\n", "ok "]))
    return prose + f"<tool_call>{json.dumps({'name': form, 'arguments': {key: value}})}</tool_call>"


MALFORMED_CALLS = ("deep", "too_many", "too_large")


@st.composite
def action(draw: st.DrawFn) -> tuple[str, str]:
    """``(kind, text)``; ``kind`` says which strategy made it (the malformed ones are checked more closely)."""
    kind = draw(
        st.sampled_from(
            [
                "junk",
                "runnable",
                "words",
                "hermes",
                "deep",
                "openai",
                "too_many",
                "boxed",
                "fenced",
                "long",
                "mix",
                "too_large",
            ]
        )
    )
    if kind == "runnable":
        return kind, draw(runnable())
    if kind == "junk":
        return kind, draw(junk)
    if kind == "words":
        return kind, draw(words)
    if kind == "hermes":
        return kind, draw(hermes_call())
    if kind == "deep":
        text = draw(nested_json_call())
        if text.startswith("```"):  # a fenced JSON block is text, not a tool call
            return "deep_text", text
        return ("deep" if text.count("[") + text.count("{") > 40 else "hermes"), text
    if kind == "openai":
        return kind, draw(openai_message())
    if kind == "too_many":
        text = draw(many_calls())
        return ("too_many" if text.count("<tool_call>") > 8 else "hermes"), text
    if kind == "boxed":
        return kind, draw(boxed())
    if kind == "fenced":
        return kind, draw(fenced())
    if kind == "long":
        return kind, draw(long_string())
    if kind == "too_large":
        return kind, "<tool_call>" + "x" * (MAX_TEXT_LENGTH + draw(st.integers(0, 1000)))
    parts = draw(st.lists(st.one_of(junk, words, hermes_call(), fenced(), boxed()), min_size=2, max_size=4))
    return kind, "\n".join(parts)


# Actions that broke a step once (issue 16, and what this fuzzer found since), replayed in every env.
KNOWN_BAD = {
    "nested-json-call": "<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>",
    "nested-json-arguments": '<tool_call>{"name": "python", "arguments": {"code": '
    + "[" * 3000
    + "]" * 3000
    + "}}</tool_call>",
    "nested-openai-message": '{"tool_calls": ' + "[" * 1500 + "]" * 1500 + "}",  # short enough for a chat reply
    "nested-json-fence": "```json\n" + "[" * 1900 + "]" * 1900 + "\n```",
    "5000-digit-box": "The answer is \\boxed{" + "7" * 5000 + "}.",
    "5000-digit-json-number": '<tool_call>{"name": "python", "arguments": {"code": ' + "9" * 5000 + "}}</tool_call>",
    "500-calls": '<tool_call>{"name": "python", "arguments": {"code": "import time; time.sleep(9.5)"}}</tool_call>'
    * 500,
    "unclosed-boxes": "\\boxed{" * 50_000,
    "nul-and-surrogates": "```bash\necho \x00 \ud800\n```",
    "long-command": "```bash\necho " + "a" * (200 * 1024) + "\n```",
    "over-the-action-space": "x" * (MAX_TEXT_LENGTH + 1),
}


@pytest.mark.parametrize("env_id", claw_envs.env_ids())
def test_known_bad_actions_are_next_states(env_id: str) -> None:
    env = gym.make(env_id).unwrapped
    budget = turn_budget(env) + SLACK_S
    try:
        for name, text in KNOWN_BAD.items():
            env.reset(seed=0)
            start = time.monotonic()
            _, _, _, _, info = env.step(text)
            took = time.monotonic() - start
            ns = info["next_state"]
            assert info["status"] == "ok" and isinstance(ns, NextState), (name, ns.text[:300])
            assert took < budget, f"{name}: step took {took:.1f} s"
            if ns.evaluative.score == -1.0:
                assert ns.directive, name
    finally:
        env.close()


# -- the property ----------------------------------------------------------------------------


def turn_budget(env: Any) -> float:
    """The longest a step of ``env`` may legitimately take: the per-turn limits it declares (the tool-time budget
    of a turn, a command's timeout plus the task check that may follow it), else 0 (no tools)."""
    budget = float(getattr(env, "turn_time_budget", 0.0) or 0.0)
    budget += float(getattr(env, "command_timeout", 0.0) or 0.0) + float(getattr(env, "check_timeout", 0.0) or 0.0)
    verifier = getattr(env, "verifier", None)
    if hasattr(env, "tool_timeout"):  # a boxed answer goes to math-verify (its own time limit)
        budget += float(getattr(verifier, "timeout", 5.0)) + 0.5
    return budget


def sized_for(env_id: str) -> tuple[Any, int, int]:
    """The env to fuzz, the number of examples and the actions per example (see the module docstring)."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)  # the first reset may start a browser or build a cache
    start = time.monotonic()
    env.reset(seed=1)
    reset_s = time.monotonic() - start
    if "CLAW_FUZZ_EXAMPLES" in os.environ or reset_s * EXAMPLES <= RESET_BUDGET_S:
        return env, EXAMPLES, ACTIONS_PER_EXAMPLE
    env.close()
    env = gym.make(env_id, max_turns=LONG_EPISODES).unwrapped
    examples = max(MIN_EXAMPLES, int(RESET_BUDGET_S / reset_s))
    return env, examples, -(-MIN_ACTIONS // examples)


@pytest.mark.timeout(900)  # a fixed number of actions, whatever the machine's load (the terminal's: 2-6 min)
@pytest.mark.parametrize("env_id", claw_envs.env_ids())
def test_no_action_crashes_or_overruns_a_step(env_id: str) -> None:
    env, examples, per_example = sized_for(env_id)
    budget = turn_budget(env) + SLACK_S
    stats: Counter[str] = Counter()
    slowest = [0.0, ""]
    state = {"done": True, "tools": False}

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=not os.environ.get("CLAW_FUZZ_RANDOM"),
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        seed=st.integers(0, 2**16),
        actions=st.lists(action(), min_size=per_example, max_size=per_example),
    )
    def run(seed: int, actions: list[tuple[str, str]]) -> None:
        _, info = env.reset(seed=seed)
        state["tools"], state["done"] = bool(info.get("tools")), False
        for kind, text in actions:
            if state["done"]:
                _, info = env.reset(seed=seed)
            start = time.monotonic()
            obs, reward, terminated, truncated, info = env.step(text)
            took = time.monotonic() - start
            stats["actions"] += 1
            stats[kind] += 1
            if took > slowest[0]:
                slowest[:] = [took, f"{kind}: {text[:120]!r} ({len(text)} chars)"]
            state["done"] = terminated or truncated
            ns = info["next_state"]
            stats[f"role={ns.role}"] += 1
            if ns.evaluative.score == -1.0 and not ns.directive:
                stats["-1 without directive"] += 1
            stats["episodes ended"] += state["done"]
            where = f"{env_id} on {kind} action {text[:200]!r} ({len(text)} chars)"
            assert took < budget, f"{where}: step took {took:.1f} s (budget {budget:g} s)"
            assert info["status"] == "ok", f"{where}: blamed on the infrastructure: {ns.text[:300]}"
            assert isinstance(ns, NextState) and -1.0 <= ns.evaluative.score <= 1.0, where
            assert isinstance(reward, float) and isinstance(obs, str | dict), where
            if state["tools"] and kind in MALFORMED_CALLS:
                assert ns.evaluative.score == -1.0 and ns.directive, f"{where}: not refused: {ns}"
                stats["refused"] += 1

    start = time.monotonic()
    try:
        run()
    finally:
        elapsed = time.monotonic() - start
        env.close()
        REPORT[env_id] = {"actions": stats["actions"], "seconds": round(elapsed, 1), "slowest": slowest}
        print(
            f"\n{env_id}: {stats['actions']} actions in {examples} examples, {elapsed:.1f} s (slowest step "
            f"{slowest[0]:.2f} s, "
            f"{slowest[1]}); by kind {dict(sorted((k, v) for k, v in stats.items() if k != 'actions'))}"
        )
    assert stats["actions"] >= min(MIN_ACTIONS, examples * per_example)
