"""claw-eval --env toolcall: metrics, --responses on competition-style solutions, a policy over HTTP, datasets."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_toolcall_env import solve_from_question

import claw_envs
from claw_envs.episodes import EpisodeResult
from claw_envs.toolcall import ToolCallEnv
from claw_envs.toolcall.env import tool_call_text
from claw_envs.toolcall.evaluation import AnswerEvaluation
from claw_envs.toolcall.tasks import NAMED, dapo_question, gsm8k_answer, load_dataset, tasks_from_hub_rows
from claw_train.commands.evaluate import main
from claw_train.evaluation import bootstrap_ci, evaluate, pass_at_k, summarize
from claw_train.evaluation.runner import TURN_SEED_STRIDE
from claw_train.options.families import tasks_for
from claw_train.policy.base import Completion, Policy, PolicyError, SamplingParams

# Problems and worked solutions written for these tests, in the style of competition solutions.
PROBLEMS = [
    {
        "id": "t1",
        "problem": "Find the number of positive integers $n \\le 1000$ that are divisible by $3$ or by $5$ but not "
        "by $15$.",
        "answer": "401",
        "solution": "There are $\\lfloor 1000/3 \\rfloor = 333$ multiples of $3$, $\\lfloor 1000/5 \\rfloor = 200$ "
        "multiples of $5$ and $\\lfloor 1000/15 \\rfloor = 66$ multiples of $15$. By inclusion-exclusion, "
        "$333 + 200 - 66 = 467$ integers are divisible by $3$ or $5$; removing the $66$ multiples of $15$ leaves "
        "$467 - 66 = \\boxed{401}$.",
    },
    {
        "id": "t2",
        "problem": "Real numbers $x$ and $y$ satisfy $x + y = 10$ and $xy = 21$. Find $x^3 + y^3$.",
        "answer": "370",
        "solution": "Since $x^3 + y^3 = (x+y)^3 - 3xy(x+y)$, we get $10^3 - 3 \\cdot 21 \\cdot 10 = 1000 - 630$. "
        "(Indeed $\\{x, y\\} = \\{3, 7\\}$ and $27 + 343 = 370$.) The answer is $\\boxed{370}$.",
    },
    {
        "id": "t3",
        "problem": "Two fair six-sided dice are rolled. The probability that the sum of the numbers shown is $8$ "
        "is $\\tfrac{m}{n}$, where $m$ and $n$ are relatively prime positive integers. Find $m + n$.",
        "answer": "41",
        "solution": "Of the $36$ equally likely outcomes, $(2,6), (3,5), (4,4), (5,3), (6,2)$ have sum $8$, so the "
        "probability is $\\boxed{\\dfrac{5}{36}}$. The fraction is in lowest terms, hence $m + n = 5 + 36 = "
        "\\boxed{41}$.",
    },
    {
        "id": "t4",
        "problem": "A right triangle has legs of lengths $20$ and $21$. Find its perimeter.",
        "answer": "70",
        "solution": "The hypotenuse is $\\sqrt{20^2 + 21^2} = \\sqrt{400 + 441} = \\sqrt{841} = 29$, so the "
        "perimeter is $20 + 21 + 29 = \\boxed{070}$.",
    },
    {
        "id": "t5",
        "problem": "Find the remainder when $7^{2024}$ is divided by $100$.",
        "answer": "1",
        "solution": "Note $7^4 = 2401 \\equiv 1 \\pmod{100}$. As $2024 = 4 \\cdot 506$, we have "
        "$7^{2024} = \\left(7^4\\right)^{506} \\equiv 1 \\pmod{100}$, so the remainder is $\\boxed{ 1 }$.",
    },
    {
        "id": "t6",
        "problem": "The side of a square is increased by $50\\%$. By what factor does its area grow? Give a fraction.",
        "answer": "\\frac{9}{4}",
        "solution": "The new side is $\\tfrac{3}{2}s$, so the new area is $\\tfrac{9}{4}s^2$: the factor is "
        "$\\boxed{2.25}$.",
    },
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def dataset(tmp_path) -> Path:
    return write_jsonl(tmp_path / "contest.jsonl", [{k: p[k] for k in ("id", "problem", "answer")} for p in PROBLEMS])


def invoke(capsys, *args: str) -> tuple[int, str]:
    """``claw-eval --env toolcall ARGS``: the exit code and everything printed (whitespace collapsed)."""
    capsys.readouterr()
    code = main(["--env", "toolcall", *args])
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- metrics ---------------------------------------------------------------------------------


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(16, 0, 16) == 0.0 and pass_at_k(16, 1, 16) == 1.0 and pass_at_k(5, 4, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [0.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.25, 0.75]
    low, high = bootstrap_ci(values, seed=0)
    assert low < sum(values) / len(values) < high and low >= 0.0 and high <= 1.0
    assert (low, high) == bootstrap_ci(values, seed=0)
    assert bootstrap_ci([1.0, 1.0], seed=0) == (1.0, 1.0)


def test_summary_counts_infra_failures_apart():
    records = [
        {"task_id": "a", "outcome": 1.0, "success": True, "predicted": "1", "status": "ok"},
        {"task_id": "a", "outcome": 0.0, "success": False, "predicted": "2", "status": "ok"},
        {"task_id": "b", "outcome": 0.0, "success": False, "predicted": None, "status": "ok"},
        {"task_id": "b", "outcome": None, "success": False, "status": "sandbox_failure"},
    ]
    s = summarize(records, k=2)
    assert s["k"] == 1 and s["k_requested"] == 2  # b has a single graded sample
    assert s["success_rate"] == pytest.approx(0.25) and s["infra_failures"] == 1
    assert AnswerEvaluation().summary([r for r in records if r["status"] == "ok"])["no_answer"] == 1


# -- claw-eval --responses -------------------------------------------------------------------


def test_competition_style_reference_solutions_all_score_correct(dataset, tmp_path, capsys):
    responses = write_jsonl(tmp_path / "refs.jsonl", [{"id": p["id"], "response": p["solution"]} for p in PROBLEMS])
    out = tmp_path / "out"
    code, output = invoke(capsys, "--tasks", str(dataset), "--responses", str(responses), "--output-dir", str(out))
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["tasks"], summary["samples"], summary["success_rate"], summary["pass_at_k"]) == (6, 6, 1.0, 1.0)
    assert summary["score"] == 1.0
    rows = read_jsonl(out / "episodes.jsonl")
    assert [r["task_id"] for r in rows] == [p["id"] for p in PROBLEMS] and all(r["success"] for r in rows)
    assert {r["task_id"]: r["predicted"] for r in rows}["t3"] == "41"  # the last of two boxes
    assert "avg@1" in output and "pass@1" in output and "100.0%" in output


def test_several_responses_per_problem_give_avg_and_pass_at_k(dataset, tmp_path, capsys):
    rows = [
        {"id": "t1", "responses": ["\\boxed{401}", "\\boxed{400}", "no idea"]},
        {"problem_id": "t2", "response": "\\boxed{370}"},
        {"task_id": "t2", "response": "so $x^3+y^3=\\boxed{370.0}$"},
        {"id": "t2", "response": "\\boxed{37}"},
    ]
    out = tmp_path / "out"
    code, output = invoke(
        capsys, "--tasks", str(dataset), "--responses", str(write_jsonl(tmp_path / "r.jsonl", rows)), "--eval-k", "2",
        "--output-dir", str(out),
    )  # fmt: skip
    assert code == 0, output
    s = json.loads((out / "summary.json").read_text())
    assert s["tasks"] == 2 and s["samples"] == 6 and s["no_answer"] == 1 and s["k"] == 2
    assert s["success_rate"] == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert s["score"] == pytest.approx(2 * s["success_rate"] - 1)  # the env's outcome: +1 right, -1 wrong
    assert s["pass_at_k"] == pytest.approx(((1 - 1 / 3) + (1 - 0 / 3)) / 2)  # 1 - C(n-c,2)/C(n,2) per problem
    low, high = s["pass_at_k_ci95"]
    assert low <= s["pass_at_k"] <= high


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        (['{"id": "t1", "response": "\\\\boxed{1}"}', "not json"], "r.jsonl:2: not JSON"),
        (['{"id": "nope", "response": "x"}'], "no problem 'nope'"),
        (['{"response": "x"}'], "no problem id"),
        (['{"id": "t1", "responses": [1, 2]}'], '"responses"'),
        ([""], "no responses"),
    ],
)
def test_bad_responses_files_are_clear_errors(dataset, tmp_path, capsys, lines, needle):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, output = invoke(
        capsys, "--tasks", str(dataset), "--responses", str(path), "--output-dir", str(tmp_path / "o")
    )
    assert code == 2 and needle in output, output
    assert not (tmp_path / "o").exists()  # nothing written on bad input


def test_bad_dataset_and_k_are_clear_errors(tmp_path, capsys):
    code, output = invoke(
        capsys, "--tasks", str(tmp_path / "[x]" / "missing.jsonl"), "--responses", str(tmp_path / "r.jsonl")
    )
    assert code == 2 and "neither a known name" in output and "[x]" in output, output
    code, output = invoke(capsys, "--eval-k", "0", "--responses", str(tmp_path / "r.jsonl"))
    assert code == 2 and "--eval-k must be at least 1" in output, output


# -- a policy over HTTP ----------------------------------------------------------------------


class _ScriptedChat(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/chat/completions that calls the tool, then boxes what it printed."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = body["messages"][-1]
        if last["role"] == "tool":
            text = f"The program printed {last['content']}, so the answer is \\boxed{{{last['content']}}}."
        else:
            text = "I will compute it.\n" + tool_call_text(solve_from_question(last["content"]))
        reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_claw_eval_runs_a_policy_over_openai_http_through_the_env(chat_server, tmp_path, capsys):
    out = tmp_path / "out"
    code, output = invoke(
        capsys, "--policy", f"openai://{chat_server}", "--model", "scripted", "--eval-n", "4", "--eval-k", "2",
        "--rollout-workers", "4", "--output-dir", str(out),
    )  # fmt: skip
    assert code == 0, output
    s = json.loads((out / "summary.json").read_text())
    assert (s["tasks"], s["samples"], s["success_rate"], s["pass_at_k"], s["infra_failures"]) == (4, 8, 1.0, 1.0, 0)
    sample = read_jsonl(out / "episodes.jsonl")[0]
    assert (sample["turns"], sample["tool_calls"], sample["status"]) == (2, 1, "ok")
    assert sample["actions_carried_out"] == 2 and (s["action_rate"], s["acting_episodes"]) == (1.0, 1.0)
    assert "actions carried out" in output and "100.0% of turns" in output


def test_claw_eval_policy_down_is_a_clear_error(tmp_path, capsys):
    code, output = invoke(
        capsys, "--policy", "openai://127.0.0.1:9", "--model", "m", "--eval-n", "1", "--output-dir", str(tmp_path)
    )
    # a failed generation is an empty reply, not an infra failure: every one failing is exit 1, with the error
    assert code == 1 and "every generation failed" in output and "127.0.0.1:9" in output, output
    record = read_jsonl(tmp_path / "episodes.jsonl")[0]
    assert record["failed_generation"] and not record["success"]


class _DownThenCrash(Policy):
    """Every generation fails; episode 1's second turn then crashes the episode (an infra failure)."""

    async def generate(self, prompt, sampling, *, tools=None):
        if sampling.seed == 1 + TURN_SEED_STRIDE:
            raise RuntimeError("model crashed")
        raise PolicyError("server down")


def test_claw_eval_exits_1_when_every_graded_generation_failed(monkeypatch, tmp_path, capsys):
    import claw_train.policy.loader

    monkeypatch.setattr(claw_train.policy.loader, "load_policy", lambda **kw: _DownThenCrash())
    code, output = invoke(capsys, "--eval-n", "2", "--eval-seed", "0", "--output-dir", str(tmp_path))
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (s["samples"], s["infra_failures"]) == (1, 1)
    assert code == 1 and "every generation failed, e.g. server down" in output, output


class _WrongOrBroken(Policy):
    """Boxes a wrong answer; crashes (not a PolicyError) on the episode sampled with seed 2."""

    async def generate(self, prompt, sampling, *, tools=None):
        if sampling.seed == 2:
            raise RuntimeError("model crashed")
        return Completion("\\boxed{-1}", [], [], "stop", self.version)


def test_evaluate_scores_wrong_and_broken_policies():
    spec = claw_envs.family_spec("toolcall")
    tasks = tasks_for(spec, None, "test")
    report = asyncio.run(
        evaluate(_WrongOrBroken(), spec, tasks, n=3, k=1, seed=0, sampling=SamplingParams(), concurrency=2)
    )
    records = report.records
    assert [r["task_id"] for r in records] == ["arith-1000000", "arith-1000001", "arith-1000002"]
    wrong = [(r["success"], r["predicted"], r["turns"], r["status"]) for r in records[:2]]
    assert wrong == [(False, "-1", 1, "ok")] * 2
    assert records[2]["status"] == "infra_failure" and "model crashed" in records[2]["error"]
    assert report.summary["infra_failures"] == 1 and report.summary["tasks"] == 2 and report.summary["no_answer"] == 0
    assert report.summary["score"] == -1.0  # the same outcome scale as --responses


class _Rambles(Policy):
    """Writes prose with no call and no answer, except on the episode sampled with seed 1, which boxes one."""

    async def generate(self, prompt, sampling, *, tools=None):
        text = "\\boxed{7}" if sampling.seed == 1 else "Let me think about the numbers here."
        return Completion(text, [], [], "stop", self.version)


def test_the_action_rate_counts_the_turns_the_env_could_carry_out():
    spec = claw_envs.family_spec("toolcall")
    tasks = tasks_for(spec, None, "test")
    report = asyncio.run(
        evaluate(_Rambles(), spec, tasks, n=2, k=1, seed=0, sampling=SamplingParams(), env_kwargs={"max_turns": 3})
    )
    turns = [(r["turns"], r["actions_carried_out"]) for r in report.records]
    assert turns == [(3, 0), (1, 1)]  # three nudges, then the limit; one graded answer
    assert report.summary["action_rate"] == 0.25 and report.summary["acting_episodes"] == 0.5


# -- datasets --------------------------------------------------------------------------------


def test_files_with_a_field_mapping_jsonl_and_parquet(tmp_path):
    rows = [{"uid": f"u{i}", "q": f"What is {i}+{i}?", "final": str(2 * i)} for i in range(3)]
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    tasks = load_dataset(f"{path}#question=q,answer=final,id=uid")
    assert [t.id for t in tasks] == ["u0", "u1", "u2"] and tasks.get("u2").data["answer"] == "4"
    pd = pytest.importorskip("pandas")
    pq = tmp_path / "mine.parquet"
    pd.DataFrame(rows).to_parquet(pq)
    assert [t.data["question"] for t in load_dataset(f"{pq}#question=q,answer=final,id=uid")] == [r["q"] for r in rows]
    with pytest.raises(ValueError, match="no question field"):
        load_dataset(str(path))
    with pytest.raises(ValueError, match="no field 'nope'"):
        load_dataset(f"{path}#question=nope,answer=final")
    with pytest.raises(ValueError, match="ours=theirs"):
        load_dataset(f"{path}#question")


def test_solution_only_rows_use_the_last_box(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [{"problem": "p", "solution": "first \\boxed{2}, then \\boxed{3}"}])
    assert next(iter(load_dataset(str(path)))).data["answer"] == "3"


def test_gsm8k_rows_from_the_shared_file(gsm8k_test_path):
    tasks = load_dataset(str(gsm8k_test_path))
    first = next(iter(tasks))
    assert first.data["question"].startswith("Janet") and first.data["answer"] == "18"
    assert gsm8k_answer("so 1,000 in all\n#### 1,000") == "1000"


def test_named_datasets_clean_rows_of_their_hub_shape():
    aime = NAMED["aime2024"].clean(
        {"id": 60, "problem": "P?", "solution": "...", "answer": "204", "url": "", "year": "2024"}
    )
    assert aime == {"question": "P?", "answer": "204", "source": "aime2024"}
    prompt = [
        {
            "role": "user",
            "content": "Solve the following math problem step by step. The last line of your response should be "
            "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
            'How many primes are below 20?\n\nRemember to put your answer on its own line after "Answer:".',
        }
    ]
    dapo = NAMED["dapo-math"].clean({"prompt": prompt, "reward_model": {"ground_truth": "8", "style": "rule"}})
    assert dapo == {"question": "How many primes are below 20?", "answer": "8", "source": "dapo-math"}
    assert dapo_question(prompt) == "How many primes are below 20?"
    gsm = NAMED["gsm8k"].clean({"question": "Q", "answer": "steps\n#### 42"})
    assert gsm["answer"] == "42"
    assert (NAMED["aime2024"].hf_id, NAMED["gsm8k"].config) == ("HuggingFaceH4/aime_2024", "main")


def test_hub_rows_become_tasks_and_dapo_repeats_are_dropped():
    datasets = pytest.importorskip("datasets")
    prompt = "Solve the following math problem step by step. Write Answer: $Answer at the end.\n\n{q}"
    rows = [
        {
            "prompt": [{"role": "user", "content": prompt.format(q=f"Q{i % 3}?")}],
            "reward_model": {"ground_truth": str(i % 3), "style": "rule"},
            "extra_info": {"index": f"uuid-{i % 3}"},
        }
        for i in range(9)
    ]
    tasks = tasks_from_hub_rows("dapo-math", datasets.Dataset.from_list(rows), "train")
    assert [t.id for t in tasks] == ["dapo-math-uuid-0", "dapo-math-uuid-1", "dapo-math-uuid-2"]
    assert tasks.get("dapo-math-uuid-2").data == {"question": "Q2?", "answer": "2", "source": "dapo-math"}
    aime = [
        {"id": 60 + i, "problem": f"P{i}", "solution": "", "answer": str(i), "url": "", "year": "2024"}
        for i in range(2)
    ]
    assert [t.id for t in tasks_from_hub_rows("aime2024", datasets.Dataset.from_list(aime), "test")] == [
        "aime2024-60",
        "aime2024-61",
    ]


def test_a_named_dataset_without_network_is_a_clear_error(tmp_path, monkeypatch, capsys):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: nothing to fall back on
    code, output = invoke(capsys, "--tasks", "aime2024", "--responses", str(tmp_path / "r.jsonl"))
    assert code == 2 and "--tasks aime2024: Couldn't reach 'HuggingFaceH4/aime_2024'" in output, output


def test_an_answer_on_a_final_answer_line_is_recorded_as_graded_not_as_missing():
    env = ToolCallEnv()
    try:
        _, info = env.reset(seed=0)
        action = f"Adding up.\nThe final answer is {env.task.data['answer']}."
        _, reward, term, _, step_info = env.step(action)
    finally:
        env.close()
    episode = EpisodeResult(task_id="t", actions=[action], rewards=[reward], infos=[info, step_info], terminated=term)
    record = AnswerEvaluation().record(episode)
    assert record["predicted"] == str(env.task.data["answer"]).replace(",", "")
    assert record["answer_form"] == "final_answer_line" and record["graded_by"] != "no_answer"
    summary = AnswerEvaluation().summary([record])
    assert summary == {"no_answer": 0, "line_answers": 1}
