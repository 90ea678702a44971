"""claw/Conversation-v0: episodes, signals, bad input, personas, demonstrations, GSM8K, the LLM
simulator's HTTP contract, and the personalization score through ``claw-eval``."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import claw_envs
from claw_envs.conversation import (
    ConversationEnv,
    LLMSimulator,
    Problem,
    Turn,
    builtin_tasks,
    demonstrations,
    extract_signals,
    hinted_messages,
    load_gsm8k,
    load_persona,
    render_reply,
    rubric,
)
from claw_envs.conversation.demos import hint_forms
from claw_envs.conversation.score import MAX_REPLY_CHARS
from claw_envs.conversation.tasks import numbers_in, split_of
from claw_train.evaluation import evaluate
from claw_train.evaluation.scripted import ScriptedPolicy
from claw_train.policy.base import PolicyError, SamplingParams

PERSONAS = ("student", "teacher")


def assistant_reply(env: ConversationEnv) -> str:
    return render_reply(env.persona, env.problem, "assistant", np.random.default_rng(0), env.work)


@pytest.mark.parametrize("persona", PERSONAS)
def test_check_env(persona):
    env = gym.make("claw/Conversation-v0", persona=persona)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def play(seed: int, persona: str, replies: list[str]) -> list[tuple]:
    env = ConversationEnv(persona=persona)
    obs, _ = env.reset(seed=seed)
    trace = [obs]
    for reply in replies:
        obs, reward, term, trunc, info = env.step(reply or env.reference_action())
        trace.append((obs, reward, term, trunc, info["next_state"], info["problem_id"]))
    env.close()
    return trace


@pytest.mark.parametrize("persona", PERSONAS)
def test_seeded_episodes_are_reproducible(persona):
    replies = ["**13**", "", "so it's 5", "", ""]
    np.random.seed(0)
    a = play(7, persona, replies)
    np.random.seed(99)
    b = play(7, persona, replies)
    assert a == b
    assert play(8, persona, replies) != a


def test_train_and_test_problems_are_disjoint():
    train, test = builtin_tasks("train"), builtin_tasks("test")
    assert (train.split, test.split) == ("train", "test")
    rng = np.random.default_rng(0)
    train_q = {train.sample(rng).data["question"] for _ in range(3000)}
    test_q = {t.data["question"] for t, _ in zip(test, range(3000), strict=False)}
    assert len(train_q) > 2500 and len(test_q) > 1800  # small numbers: ~5,000 test questions in the test seeds
    assert train_q.isdisjoint(test_q)
    assert {split_of(q) for q in train_q} == {"train"} and {split_of(q) for q in test_q} == {"test"}
    problem = Problem.from_task(test.get("homework-test-10000005"))
    assert float(problem.answer).is_integer() and problem.answer >= 0 and 1 <= len(problem.steps) <= 2
    with pytest.raises(ValueError, match="splits"):
        builtin_tasks("validation")


def test_episode_complaint_then_thanks_then_next_problem():
    env = ConversationEnv(persona="student")
    obs, info = env.reset(seed=3)
    assert info["messages"] == [{"role": "user", "content": obs}]
    first = env.problem
    assert first.question in obs
    _, reward, term, trunc, info = env.step(assistant_reply(env))
    ns = info["next_state"]
    assert ns.role == "user" and ns.step_index == 1
    assert ns.evaluative.score == -1.0 and "user_complaint" in ns.evaluative.tags
    assert ns.directive in env.persona.preference("no_bold").phrasing.corrections
    assert reward == pytest.approx(1 / 6) and not (term or trunc)
    assert set(ns.judge_inputs) == {"task", "history", "action", "result"}
    assert ns.judge_inputs["task"] == obs and ns.judge_inputs["result"] == ns.text
    assert info["rubric"]["met"]["no_bold"] is False and info["answer_correct"]
    assert env.problem is first  # the user stays on the problem

    obs, reward, _, _, info = env.step(env.reference_action())
    ns = info["next_state"]
    assert reward == 1.0 and ns.evaluative.score == 1.0 and ns.directive is None
    assert info["satisfied"] and info["problem_id"] == first.id != info["next_problem_id"]
    assert env.problem.question in obs and first.question not in obs
    assert [m["role"] for m in info["messages"]] == ["user", "assistant", "user", "assistant", "user"]


@pytest.mark.parametrize("persona", PERSONAS)
def test_wrong_and_missing_answers_get_reasks(persona):
    env = ConversationEnv(persona=persona)
    for seed in range(5, 100):  # a reply naming another number too, so the teacher's is still specific once changed
        env.reset(seed=seed)
        right = env.reference_action()
        if len(set(numbers_in(right))) >= 2:
            break
    final = list(re.finditer(rf"\b{env.problem.answer}\b", right))[-1]  # the reply's last number
    wrong = f"{right[: final.start()]}{env.problem.answer + 100}{right[final.end() :]}"
    for reply, kind in ((wrong, "wrong_answer"), ("ok i really am not sure about this one", "missing_answer")):
        _, _, _, _, info = env.step(reply)
        ns = info["next_state"]
        assert ns.evaluative.score == -1.0 and ns.directive in env.persona.reask[kind].corrections, ns.text
        assert not info["answer_correct"]


def test_patience_runs_out_and_user_moves_on_with_a_complaint():
    env = ConversationEnv(persona="student")
    env.reset(seed=1)
    ids = []
    for _ in range(3):
        _, _, _, _, info = env.step("**bold** so it's 1")
        ids.append(info["next_problem_id"])
    assert ids[0] == ids[1] == info["problem_id"] != ids[2]
    ns = info["next_state"]
    assert info["moved_on"] and not info["satisfied"] and ns.evaluative.score == -1.0
    assert any(g in ns.text for g in env.persona.give_up) and env.problem.question in ns.text


def test_turn_limit_truncates_with_mean_score_outcome():
    env = ConversationEnv(persona="teacher", max_turns=3)
    env.reset(seed=2)
    rewards = []
    for _ in range(3):
        _, reward, term, trunc, info = env.step(env.reference_action() if len(rewards) % 2 else "")
        rewards.append(reward)
    assert trunc and not term
    assert info["next_state"].outcome == pytest.approx(np.mean(rewards)) == pytest.approx(1 / 3)


BAD_INPUTS = {
    "empty": "",
    "too_long": "so it's 13 " * 50_000,
    "junk": b"\xff\xfe\xfa\xfb\xfc\xfd\xff\xfe 13 \xc3\x28\xa0\xa1",
    "language": "答案是十三，因为十二加五等于十七，再减四。",
    "tool_call": '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 5 - 4"}}</tool_call>',
}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("kind", list(BAD_INPUTS))
def test_bad_input_gets_a_user_reaction_and_signals(persona, kind):
    env = ConversationEnv(persona=persona)
    env.reset(seed=4)
    _, reward, term, trunc, info = env.step(BAD_INPUTS[kind])
    ns = info["next_state"]
    assert info["status"] == "ok" and ns.role == "user" and not (term or trunc)
    assert info["rubric"]["invalid_kind"] == kind and not info["valid_reply"] and reward == 0.0
    assert ns.evaluative.score == -1.0 and ns.directive in env.persona.reask[kind].corrections, ns.text
    assert isinstance(info["messages"][-2]["content"], str)
    if kind == "too_long":
        assert str(MAX_REPLY_CHARS) in ns.text
        assert ns.judge_inputs["action"].endswith(
            f"[... cut: {len(BAD_INPUTS[kind]) - MAX_REPLY_CHARS} more characters]"
        )
        assert len(ns.judge_inputs["action"]) < MAX_REPLY_CHARS + 100


@pytest.mark.parametrize(
    ("text", "score", "directive"),
    [
        ("thanks!! that's perfect", 1.0, None),
        ("thanks, but please don't use bold next time.", -1.0, "please don't use bold next time."),
        ("Looks like a bot wrote this. Write it like a kid would.", -1.0, "Write it like a kid would."),
        ("hmm what's the answer though? Can you say the number?", -1.0, "Can you say the number?"),
        ("that's wrong, try again", -1.0, "try again"),
        ("ok", 0.0, None),
    ],
)
def test_signals_come_from_the_users_words(text, score, directive):
    signals = extract_signals(text)
    assert signals.evaluative.score == score and signals.directive == directive


@pytest.mark.parametrize("persona", PERSONAS)
def test_demonstrations_two_styles_and_hinted_pairs(persona):
    p = load_persona(persona)
    rows = demonstrations(p, 60, seed=3)
    assert rows == demonstrations(p, 60, seed=3) and rows != demonstrations(p, 60, seed=4)
    assert {tuple(sorted(r)) for r in rows} == {("completion", "hint", "hinted", "messages", "persona", "style")}
    assert {r["persona"] for r in rows} == {persona}
    counts = {
        k: sum(1 for r in rows if (r["style"], r["hinted"]) == k) for k in {(r["style"], r["hinted"]) for r in rows}
    }
    assert counts == {("assistant", False): 33, ("persona", False): 3, ("persona", True): 24}
    corrections = {c for pref in p.preferences for c in pref.phrasing.corrections}
    forms = {form for c in corrections for form in hint_forms(c)}
    for row in rows:
        last = row["messages"][-1]["content"]
        assert 25 <= len(row["completion"]) <= 200, row["completion"]
        if row["hinted"]:
            assert row["hint"] in forms and last.endswith(f"\n\n[Note: {row['hint']}]")
        else:
            assert "[Note:" not in last and row["hint"] is None
    other = next(q for q in PERSONAS if q != persona)
    mixed = ConversationEnv(persona=persona).demonstrations(40, seed=1)  # half the env's persona, half the other's
    assert sorted(r["persona"] for r in mixed) == sorted([persona] * 20 + [other] * 20)
    assert all(r in demonstrations(load_persona(r["persona"]), 20, seed=1 + (r["persona"] == other)) for r in mixed)


def test_demonstration_styles_score_as_intended():
    tasks = builtin_tasks("train")
    rng = np.random.default_rng(0)
    for persona in map(load_persona, PERSONAS):
        for _ in range(40):
            task = tasks.sample(rng)
            problem = Problem.from_task(task)
            assert split_of(problem.question) == "train"
            assert rubric(persona, render_reply(persona, problem, "persona", rng), problem).score == 1.0
            assert rubric(persona, render_reply(persona, problem, "assistant", rng), problem).score <= 0.3


def test_demo_hints_match_what_the_rules_judge_hands_the_trainer():
    from judges.backends.rules import directive_to_hint

    for persona in map(load_persona, PERSONAS):
        for pref in persona.preferences:
            for correction in pref.phrasing.corrections:
                assert directive_to_hint(correction) in hint_forms(correction)


def test_hinted_messages_format():
    msgs = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]
    out = hinted_messages(msgs, "  Don't use bold. ")
    assert out[-1] == {"role": "user", "content": "q2\n\n[Note: Don't use bold.]"}
    assert out[:2] == msgs[:2] and msgs[-1]["content"] == "q2"
    assert hinted_messages([{"role": "system", "content": "s"}], "hint")[-1] == {
        "role": "user",
        "content": "[Note: hint]",
    }


def test_user_personas_from_a_file_and_clear_errors(tmp_path):
    student = load_persona("student")
    path = tmp_path / "kid.yaml"
    path.write_text(student.source.read_text().replace("name: student", "name: kid"))
    env = ConversationEnv(persona=str(path))
    env.reset(seed=0)
    _, reward, _, _, _ = env.step(env.reference_action())
    assert env.persona.name == "kid" and reward == 1.0
    with pytest.raises(ValueError, match="built-in ones are student, teacher"):
        load_persona("pirate")
    broken = {
        "unknown check": ("name: no_bold\n", "name: no_bold\n    check: no_capitals\n"),
        "does not read as thanks": ('"perfect, thanks!!"', '"ugh, whatever."'),
        "corrective sentence": ('"Don\'t use any bold text."', '"bold is bad."'),
        "must contain": ('"next: {question}"', '"next one please"'),
    }
    for message, (old, new) in broken.items():
        bad = tmp_path / f"bad{len(message)}.yaml"
        assert old in student.source.read_text()
        bad.write_text(student.source.read_text().replace(old, new, 1))
        with pytest.raises(ValueError, match=message):
            load_persona(bad)


def test_gsm8k_from_shared_data(gsm8k_test_path):
    tasks = load_gsm8k(gsm8k_test_path, split="test")
    assert len(tasks) == 1319 and tasks.split == "test"
    problem = Problem.from_task(tasks.get("gsm8k-test-0"))
    assert problem.answer == 18 and [s.result for s in problem.steps] == [9, 18]
    for persona in PERSONAS:
        env = ConversationEnv(tasks, persona=persona, split="test")
        obs, _ = env.reset(seed=0, options={"task_id": "gsm8k-test-0"})
        assert problem.question in obs
        _, reward, _, _, info = env.step(env.reference_action())
        assert reward == 1.0 and info["answer_correct"]


def test_gsm8k_loader_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no final line"}\n')
    with pytest.raises(ValueError, match=r"#### <number>"):
        load_gsm8k(bad)
    with pytest.raises(FileNotFoundError):
        load_gsm8k(tmp_path / "missing.jsonl")


class _ChatStub(BaseHTTPRequestHandler):
    """A chat-completions endpoint: complains when the reply it is shown has bold, else thanks."""

    mode = "ok"
    requests: ClassVar[list[dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        if self.mode == "500":
            self._send(500, b'{"error": "overloaded"}')
            return
        if self.mode == "garbage":
            self._send(200, b"<html>not json</html>")
            return
        system = body["messages"][0]["content"]
        shown = system.split("The assistant has just answered")[1]
        content = (
            "ugh why is this bold, my teacher will know. Write it without bold.\n[[NOT SATISFIED]]"
            if "**" in shown
            else "thanks, that's perfect!\n[[SATISFIED]]"
        )
        reply = {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        }
        self._send(200, json.dumps(reply).encode())

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatStub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    _ChatStub.mode, _ChatStub.requests = "ok", []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_llm_simulator_speaks_the_chat_completions_contract(chat_stub):
    """Protocol test: a local server that speaks the OpenAI chat-completions JSON, not a real model."""
    env = ConversationEnv(persona="student", simulator="llm", simulator_options={"base_url": chat_stub, "model": "m"})
    env.reset(seed=0)
    _, _, _, _, info = env.step(assistant_reply(env))
    ns = info["next_state"]
    assert ns.text.startswith("ugh why is this bold") and "[[" not in ns.text
    assert ns.evaluative.score == -1.0 and ns.directive == "Write it without bold."
    request = _ChatStub.requests[-1]
    assert request["path"] == "/v1/chat/completions" and request["body"]["model"] == "m"
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]
    system = request["body"]["messages"][0]["content"]
    assert env.problem.question in system and str(env.problem.answer) in system and "no markdown bold" in system
    _, _, _, _, info = env.step(env.reference_action())
    assert (
        info["satisfied"]
        and info["next_state"].evaluative.score == 1.0
        and info["next_problem_id"] != info["problem_id"]
    )
    env.close()


def test_persona_prompts_render_for_builtin_and_user_personas(tmp_path):
    """Each persona prompt renders from a real turn; a user persona without its own template gets generic.jinja."""
    custom = tmp_path / "kid.yaml"
    custom.write_text(load_persona("student").source.read_text().replace("name: student", "name: kid"))
    simulator = LLMSimulator("http://127.0.0.1:9/v1", "m")
    for persona in ("student", "teacher", str(custom)):
        env = ConversationEnv(persona=persona)
        env.reset(seed=0)
        env.step("**hi** it's 3")
        turn = Turn(
            persona=env.persona,
            problem=env.problem,
            work=env.work,
            request=env.request,
            reply="so it's 12",
            reply_length=25,
            rubric=rubric(env.persona, "so it's 12", env.problem),
            attempt=2,
            history=env.messages,
        )
        text = simulator.prompt(turn)
        assert env.problem.question in text and "**hi** it's 3" in text and env.persona.description in text
        assert "so it's 12\n[... 15 more characters not shown" in text and text.rstrip().endswith("otherwise.")
        assert all(p.description in text for p in env.persona.preferences)
        assert (env.work is not None and env.work.text() in text) == (persona == "teacher")
        assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("mode", ["500", "garbage"])
def test_llm_simulator_failures_are_typed_not_raised(chat_stub, mode, monkeypatch):
    """Protocol test: a failing endpoint gives ``simulator_failure``, never an exception."""
    _ChatStub.mode = mode
    env = ConversationEnv(persona="teacher", simulator=LLMSimulator(chat_stub, "m", retries=1))
    env.reset(seed=0)
    _, _, _, trunc, info = env.step("Great job 🎉 your 12 is correct")
    assert info["status"] == "simulator_failure" and trunc
    assert len(_ChatStub.requests) == (2 if mode == "500" else 1)
    env.close()
    monkeypatch.delenv("CLAW_SIMULATOR_URL", raising=False)
    with pytest.raises(ValueError, match="CLAW_SIMULATOR_URL"):
        ConversationEnv(simulator="llm")


@pytest.mark.parametrize("persona", PERSONAS)
def test_claw_eval_scores_scripted_policies(persona, tmp_path, capsys):
    from claw_train.commands.evaluate import main

    scores = {}
    for style in ("assistant", "persona"):
        out = tmp_path / style
        args = ["--env", "conversation", "--persona", persona, "--policy", f"scripted:{style}", "--eval-n", "24"]
        assert main([*args, "--output-dir", str(out)]) == 0
        text = capsys.readouterr().out
        assert "personalization score" in text and "valid-reply rate" in text
        summary = json.loads((out / "summary.json").read_text())
        lines = (out / "episodes.jsonl").read_text().splitlines()
        assert len(lines) == summary["tasks"] == 24 and summary["valid_rate"] == 1.0 and summary["correct_rate"] == 1.0
        assert summary["persona"] == persona
        scores[style] = summary["score"]
    assert scores["assistant"] <= 0.3
    assert scores["persona"] >= 0.9
    assert main(["--env", "conversation", "--persona", "pirate", "--policy", "scripted:persona"]) == 2
    assert "unknown persona" in capsys.readouterr().out


class _PolicyStub(_ChatStub):
    """An OpenAI-compatible policy server that answers every chat request with one casual reply."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body})
        message = {"role": "assistant", "content": "ok so it's 7, easy."}
        reply = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
        self._send(200, json.dumps(reply).encode())


def test_claw_eval_through_an_openai_compatible_policy(tmp_path):
    """Protocol test: claw-eval drives a local chat-completions server through the openai policy backend."""
    from claw_train.commands.evaluate import main

    server = ThreadingHTTPServer(("127.0.0.1", 0), _PolicyStub)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    _PolicyStub.requests = []
    try:
        port = server.server_address[1]
        args = ["--env", "conversation", "--policy", f"openai://127.0.0.1:{port}", "--model", "m", "--eval-n", "4"]
        code = main([*args, "--output-dir", str(tmp_path)])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["score"] == 1.0 and summary["valid_rate"] == 1.0 and summary["failed_generations"] == 0
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    questions = [r["prompt"] for r in records]
    sent = [r["body"]["messages"][-1]["content"] for r in _PolicyStub.requests]
    assert sorted(sent) == sorted(questions) and len(set(sent)) == 4
    assert all(r["reply"] == "ok so it's 7, easy." for r in records)


class _Broken(ScriptedPolicy):
    async def generate(self, prompt, sampling):
        raise PolicyError("server down")


async def test_personalization_eval_counts_failed_generations():
    spec = claw_envs.family_spec("conversation")
    tasks = claw_envs.env_class(spec.env_id).default_tasks("test")
    report = await evaluate(_Broken(lambda m, s: ""), spec, tasks, n=3, k=1, seed=0, sampling=SamplingParams(seed=0))
    summary = report.summary
    assert summary["failed_generations"] == 3 and summary["score"] == 0.0 and summary["valid_rate"] == 0.0
    with pytest.raises(PolicyError, match="token ids"):
        await ScriptedPolicy(lambda m, s: "").generate([1, 2, 3], SamplingParams())


def test_claw_eval_exits_1_when_every_generation_fails(monkeypatch, capsys, tmp_path):
    import claw_train.policy.loader
    from claw_train.commands.evaluate import main

    monkeypatch.setattr(claw_train.policy.loader, "load_policy", lambda **kw: _Broken(lambda m, s: ""))
    args = ["--env", "conversation", "--policy", "inprocess", "--eval-n", "2", "--output-dir", str(tmp_path)]
    assert main(args) == 1
    assert "every generation failed, e.g. server down" in " ".join(capsys.readouterr().out.split())


def test_registered_and_async_api():
    assert claw_envs.resolve_id("conversation") == "claw/Conversation-v0"

    async def episode(seed):
        env = ConversationEnv(persona="teacher")
        await env.areset(seed=seed)
        out = await env.astep(env.reference_action())
        await env.aclose()
        return out[1]

    async def main():
        return await asyncio.gather(*(episode(s) for s in range(10)))

    assert asyncio.run(main()) == [1.0] * 10


def test_a_bot_looking_reply_draws_a_style_complaint_even_when_its_number_is_wrong():
    env = ConversationEnv(persona="student")
    env.reset(seed=5)
    answer = env.problem.answer
    wrong = assistant_reply(env).replace(str(answer), str(answer + 100))
    _, _, _, _, info = env.step(wrong)
    ns = info["next_state"]
    assert not info["answer_correct"]
    style_corrections = {c for p in env.persona.preferences for c in p.phrasing.corrections}
    assert ns.evaluative.score == -1.0 and ns.directive in style_corrections, ns.text
