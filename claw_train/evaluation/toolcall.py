"""``claw-eval --env toolcall``: avg@k and pass@k on math benchmarks (AIME 2024, GSM8K, files, built-in).

Two modes:

* **Policy**: every problem is run ``k`` times through ``claw/ToolCall-v0`` (tool calls executed in the
  sandbox, final answer graded), ``--concurrency`` episodes at once. ``--policy openai://host:port``
  evaluates any OpenAI-compatible server (SGLang, vLLM); ``inprocess`` loads ``--model`` here.
* **Responses** (``--responses FILE``): grade precomputed final responses, no model and no tools. FILE is
  JSONL, one object a line: ``{"id": "<problem id>", "response": "<text>"}`` (lines may repeat an id, one
  sample each) or ``{"id": ..., "responses": ["<text>", ...]}``; ``problem_id``/``task_id`` are accepted
  for ``id``. The last ``\\boxed{}`` of each response (outside tool-call blocks) is its answer.

Metrics, per problem with n graded samples of which c are right: accuracy c/n (avg@k is its mean over
problems) and the unbiased pass@k = 1 - C(n-c, k) / C(n, k) (Chen et al., 2021). The 95% confidence
intervals are percentile bootstrap intervals over problems (2000 resamples of the problem set, seeded
with ``--seed``): they express how much the score would move on another draw of problems like these.
Episodes that end in an infrastructure failure are left out of n and counted separately.

Writes ``problems.jsonl`` (one line per problem, with every sample) and ``summary.json`` to
``--output-dir`` (default ``runs/eval/toolcall-<dataset>-<time>``) and prints a summary table.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from claw_envs.pool import EnvPool, EpisodeResult
from claw_envs.tasks import TaskSource
from claw_envs.toolcall.datasets import load_dataset
from claw_envs.toolcall.grading import grade_response
from claw_envs.toolcall.parse import last_boxed, strip_tool_calls
from claw_train.evaluation import EvalOptions

BOOTSTRAP_RESAMPLES = 2000
ID_KEYS = ("id", "problem_id", "task_id")

Agent = Callable[[Any, dict[str, Any]], Awaitable[str]]


@dataclass
class Sample:
    """One graded attempt at a problem."""

    correct: bool
    predicted: str | None
    method: str
    response: str
    turns: int = 1
    tool_calls: int = 0
    status: str = "ok"
    error: str | None = None


@dataclass
class ProblemResult:
    """Every sample of one problem."""

    id: str
    answer: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def graded(self) -> list[Sample]:
        return [s for s in self.samples if s.status == "ok"]


class EvalError(Exception):
    """Bad input to the evaluation (unknown dataset, bad responses file), reported without a traceback."""

    exit_code = 2


class RunFailed(EvalError):
    """Every episode failed (policy server down, sandbox broken): nothing to score."""

    exit_code = 1


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c right: 1 - C(n-c, k)/C(n, k); needs n >= k."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def bootstrap_ci(values: Sequence[float], seed: int, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``values`` (resampling the values)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def summarize(results: Sequence[ProblemResult], k: int, seed: int = 0) -> dict[str, Any]:
    """avg@k, pass@k and their intervals over the problems with at least one graded sample."""
    counted = [r for r in results if r.graded]
    if not counted:
        raise EvalError("no problem has a graded sample")
    n_min = min(len(r.graded) for r in counted)
    k_eff = min(k, n_min)
    acc = [sum(s.correct for s in r.graded) / len(r.graded) for r in counted]
    passk = [pass_at_k(len(r.graded), sum(s.correct for s in r.graded), k_eff) for r in counted]
    return {
        "problems": len(counted),
        "problems_without_samples": len(results) - len(counted),
        "samples": sum(len(r.graded) for r in counted),
        "infra_failures": sum(len(r.samples) - len(r.graded) for r in results),
        "k": k_eff,
        "k_requested": k,
        "avg_at_k": float(np.mean(acc)),
        "avg_at_k_ci95": bootstrap_ci(acc, seed),
        "pass_at_k": float(np.mean(passk)),
        "pass_at_k_ci95": bootstrap_ci(passk, seed + 1),
        "no_answer": sum(s.predicted is None for r in counted for s in r.graded),
    }


# -- the command -----------------------------------------------------------------------------


def run(opts: EvalOptions) -> int:
    """``claw-eval --env toolcall``: 0 on success, 2 on bad input, 1 when every episode failed."""
    console = Console()
    try:
        if opts.k < 1:
            raise EvalError(f"--k must be at least 1, got {opts.k}")
        tasks = _load_tasks(opts)
        if opts.responses is not None:
            results = grade_responses_file(opts.responses, tasks, progress=_progress(console))
        else:
            results = asyncio.run(_run_policy(opts, tasks, console))
        summary = summarize(results, opts.k, opts.seed)
    except EvalError as err:
        console.print(f"[red]claw-eval:[/] {escape(str(err))}")
        return err.exit_code
    out_dir = (
        opts.output_dir or Path("runs") / "eval" / f"toolcall-{_dataset_label(opts)}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    summary = {**summary, "dataset": opts.dataset or "builtin", "model": opts.model, "policy": opts.policy}
    if opts.responses is not None:
        summary.update(model=None, policy=None, responses=str(opts.responses))
    write_results(out_dir, results, summary)
    console.print(summary_table(summary))
    console.print(f"per-problem results: {out_dir / 'problems.jsonl'}", markup=False)
    return 0


def grade_responses_file(path: Path, tasks: TaskSource, progress: Progress | None = None) -> list[ProblemResult]:
    """Grade the precomputed responses in ``path`` (format in the module docstring) against ``tasks``."""
    by_id = {t.id: t for t in tasks}
    wanted: dict[str, list[str]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise EvalError(f"cannot read responses file {path}: {err.strerror or err}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        pid, texts = _read_response_line(line, f"{path}:{lineno}")
        if pid not in by_id:
            sample = ", ".join(list(by_id)[:5])
            raise EvalError(f"{path}:{lineno}: no problem {pid!r} in the dataset (ids look like: {sample}, …)")
        wanted.setdefault(pid, []).extend(texts)
    if not wanted:
        raise EvalError(f"{path}: no responses")
    results = []
    total = sum(map(len, wanted.values()))
    with progress or _progress(Console()) as bar:
        job = bar.add_task("grading", total=total)
        for pid, texts in wanted.items():
            task = by_id[pid]
            result = ProblemResult(pid, str(task.data["answer"]))
            for text in texts:
                grade = grade_response(text, result.answer)
                result.samples.append(Sample(grade.correct, grade.predicted, grade.method, text))
                bar.advance(job)
            results.append(result)
    return results


def write_results(out_dir: Path, results: Sequence[ProblemResult], summary: dict[str, Any]) -> None:
    """``problems.jsonl`` (one line per problem with its samples) and ``summary.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    k = summary["k"]
    with (out_dir / "problems.jsonl").open("w", encoding="utf-8") as fh:
        for r in results:
            n, c = len(r.graded), sum(s.correct for s in r.graded)
            row = {
                "id": r.id,
                "answer": r.answer,
                "n": n,
                "correct": c,
                "accuracy": c / n if n else None,
                f"pass@{k}": pass_at_k(n, c, k) if n >= k else None,
                "samples": [asdict(s) for s in r.samples],
            }
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def summary_table(summary: dict[str, Any]) -> Table:
    """The rich table ``claw-eval`` prints."""
    k = summary["k"]
    table = Table(title=escape(f"toolcall · {summary['dataset']}"), show_lines=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI (bootstrap over problems)", justify="right")
    table.add_row("problems", str(summary["problems"]), "")
    table.add_row("samples", str(summary["samples"]), "")
    for key, label in (("avg_at_k", f"avg@{k}"), ("pass_at_k", f"pass@{k}")):
        low, high = summary[f"{key}_ci95"]
        table.add_row(label, f"{100 * summary[key]:.1f}%", f"{100 * low:.1f}% – {100 * high:.1f}%")
    table.add_row("no boxed answer", str(summary["no_answer"]), "")
    if summary["infra_failures"]:
        table.add_row("[red]infrastructure failures (not counted)[/]", str(summary["infra_failures"]), "")
    if summary["k"] != summary["k_requested"]:
        table.add_row(f"[yellow]k lowered from {summary['k_requested']}[/]", "fewest samples per problem", "")
    return table


# -- running a policy ------------------------------------------------------------------------


async def sample_episodes(
    env_id: str,
    env_kwargs: dict[str, Any],
    agent_for: Callable[[int], Agent],
    requests: Sequence[tuple[str, int]],
    concurrency: int,
    on_done: Callable[[], None] | None = None,
) -> list[Sample]:
    """One episode per ``(task_id, seed)`` request through an :class:`~claw_envs.pool.EnvPool` of
    ``concurrency`` envs, each driven by its own ``agent_for(seed)``; samples come back in request order."""
    async with EnvPool(env_id, max(1, concurrency), env_kwargs=env_kwargs) as pool:

        async def one(task_id: str, seed: int) -> Sample:
            result = await pool.run_episode(agent_for(seed), seed=seed, options={"task_id": task_id})
            if on_done is not None:
                on_done()
            return episode_sample(result)

        return list(await asyncio.gather(*(one(t, s) for t, s in requests)))


def episode_sample(result: EpisodeResult) -> Sample:
    """A pool's episode as a graded sample (its last next state carries the grade)."""
    steps = [info["next_state"] for info in result.infos if "next_state" in info]
    tags = [tag for ns in steps for tag in ns.evaluative.tags]
    method = next((t.split("=", 1)[1] for t in tags if t.startswith("graded_by=")), "no_answer")
    calls = sum(int(t.split("=", 1)[1]) for t in tags if t.startswith("calls="))
    last = result.actions[-1] if result.actions else ""
    predicted = last_boxed(strip_tool_calls(last)) if result.terminated else None
    correct = result.status == "ok" and bool(steps) and steps[-1].outcome == 1.0
    return Sample(correct, predicted, method, last, len(result.actions), calls, result.status, result.error)


async def _run_policy(opts: EvalOptions, tasks: TaskSource, console: Console) -> list[ProblemResult]:
    from claw_train.policy.base import PolicyError, SamplingParams
    from claw_train.policy.loader import load_policy

    try:
        policy = load_policy(model=opts.model, policy=opts.policy, family="toolcall")
    except PolicyError as err:
        raise EvalError(str(err)) from None
    problems = list(tasks)
    # every sample gets its own seed (the same seed would make the k samples of a seeded server identical)
    requests = [
        (t.id, (opts.seed * len(problems) + i) * opts.k + j) for i, t in enumerate(problems) for j in range(opts.k)
    ]

    def agent_for(seed: int) -> Agent:
        turn = 0

        async def agent(obs: Any, info: dict[str, Any]) -> str:
            nonlocal turn
            turn += 1
            sampling = SamplingParams(
                max_new_tokens=opts.max_new_tokens, temperature=opts.temperature, seed=seed * 64 + turn
            )
            return (await policy.generate(info["messages"], sampling)).text

        return agent

    env_kwargs = {"tasks": tasks, "split": opts.split}
    try:
        with _progress(console) as bar:
            job = bar.add_task(f"{len(problems)} problems × {opts.k}", total=len(requests))
            samples = await sample_episodes(
                opts.env, env_kwargs, agent_for, requests, opts.concurrency, lambda: bar.advance(job)
            )
    finally:
        await policy.aclose()
    failed = [s for s in samples if s.status != "ok"]
    if failed:
        first = escape(str(failed[0].error))
        console.print(f"[red]{len(failed)} of {len(samples)} episodes failed[/] (not counted); first: {first}")
    if len(failed) == len(samples):
        raise RunFailed(f"every episode failed; the first: {failed[0].error}")
    results = {t.id: ProblemResult(t.id, str(t.data["answer"])) for t in problems}
    for (task_id, _), sample in zip(requests, samples, strict=True):
        results[task_id].samples.append(sample)
    return list(results.values())


# -- helpers ---------------------------------------------------------------------------------


def _load_tasks(opts: EvalOptions) -> TaskSource:
    try:
        if opts.dataset is None:
            return load_dataset("builtin", split=opts.split, limit=opts.n)
        return load_dataset(opts.dataset, split=opts.split)
    except ValueError as err:
        raise EvalError(str(err)) from None
    except Exception as err:  # the hub: no network, unknown dataset, missing `datasets`
        raise EvalError(f"cannot load dataset {opts.dataset!r}: {err}") from None


def _read_response_line(line: str, where: str) -> tuple[str, list[str]]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise EvalError(f"{where}: not JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise EvalError(f"{where}: expected a JSON object")
    pid = next((row[key] for key in ID_KEYS if key in row), None)
    if pid is None:
        raise EvalError(f"{where}: no problem id (one of {', '.join(ID_KEYS)})")
    texts = row["responses"] if "responses" in row else [row.get("response")]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise EvalError(f'{where}: need "response": "<text>" or "responses": ["<text>", ...]')
    return str(pid), texts


def _dataset_label(opts: EvalOptions) -> str:
    name = opts.dataset or "builtin"
    return Path(name.partition("#")[0]).stem if ("/" in name or "." in name) else name


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
