"""``claw-eval --env conversation``: the personalization score of a policy, as in the reference paper.

The score is the mean rubric score (``claw_envs.conversation.score``) of the policy's FIRST reply to
each of ``n`` held-out problems — the first ``n`` distinct ones of the test split, or of ``--dataset`` (a GSM8K-format
JSONL path or ``openai/gsm8k``) — asked in the persona's voice. Sampling is seeded: problem ``i`` is
sampled with seed ``seed + i`` and its opening message drawn with the same seed, so runs are
comparable. The valid-reply rate and answer correctness are reported beside the score, never in it,
with each preference's pass rate.

``--policy scripted:assistant`` / ``scripted:persona`` run the scripted policies (no model); any other
``--policy`` goes through ``claw_train.policy.loader.load_policy``. With ``--output-dir`` the run writes
``conversation-<persona>.jsonl`` (one line per problem) and ``conversation-<persona>-summary.json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from claw_envs.conversation import ConversationEnv, Persona, load_gsm8k, load_persona
from claw_envs.tasks import Task, TaskSource
from claw_train.evaluation import EvalOptions
from claw_train.policy.base import Policy, PolicyError, SamplingParams


@dataclass
class EvalReport:
    """The personalization evaluation of one policy on one persona."""

    persona: str
    n: int
    score: float
    score_sd: float
    valid_rate: float
    correct_rate: float
    preference_rates: dict[str, float]
    failed_generations: int
    records: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Everything but the per-problem records."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "records"}


def first_distinct(tasks: TaskSource, n: int) -> list[Task]:
    """The first ``n`` tasks of ``tasks`` with distinct questions (procedural splits repeat some)."""
    seen: set[str] = set()
    chosen = []
    for task in tasks:
        if len(chosen) >= n:
            break
        question = str(task.data.get("question", task.id))
        if question not in seen:
            seen.add(question)
            chosen.append(task)
    return chosen


async def personalization_eval(
    policy: Policy,
    *,
    persona: str | Persona,
    n: int,
    seed: int,
    sampling: SamplingParams,
    tasks: TaskSource | None = None,
    concurrency: int = 8,
) -> EvalReport:
    """Mean rubric score of ``policy``'s first reply to each of the first ``n`` distinct problems of ``tasks``
    (default: the built-in test split).

    A generation that fails (``PolicyError``) counts as an empty reply: score 0, invalid.
    """
    persona = load_persona(persona)
    tasks = tasks or ConversationEnv.default_tasks("test")
    chosen = first_distinct(tasks, n)
    if not chosen:
        raise ValueError("no problems to evaluate (n must be at least 1)")
    gate = asyncio.Semaphore(max(1, concurrency))
    base_seed = seed if sampling.seed is None else sampling.seed

    async def one(i: int, task_id: str) -> dict[str, Any]:
        env = ConversationEnv(tasks, persona=persona, split=tasks.split)
        try:
            _, info = await env.areset(seed=seed + i, options={"task_id": task_id})
            finish = "stop"
            async with gate:
                try:
                    completion = await policy.generate(
                        info["messages"], dataclasses.replace(sampling, seed=base_seed + i)
                    )
                    reply, finish = completion.text, completion.finish_reason
                except PolicyError as err:
                    reply, finish = "", f"error: {err}"
            _, reward, _, _, step = await env.astep(reply)
        finally:
            await env.aclose()
        ns = step["next_state"]
        return {
            "task_id": task_id,
            "prompt": info["messages"][-1]["content"],
            "reply": reply,
            "finish_reason": finish,
            "score": reward,
            **step["rubric"],
            "user_reply": ns.text,
            "evaluative": ns.evaluative.score,
            "directive": ns.directive,
        }

    records = await asyncio.gather(*(one(i, t.id) for i, t in enumerate(chosen)))
    scores = [r["score"] for r in records]
    names = [p.name for p in persona.preferences]
    return EvalReport(
        persona=persona.name,
        n=len(records),
        score=statistics.fmean(scores),
        score_sd=statistics.pstdev(scores),
        valid_rate=statistics.fmean(r["valid"] for r in records),
        correct_rate=statistics.fmean(r["correct"] for r in records),
        preference_rates={k: statistics.fmean(r["met"][k] for r in records) for k in names},
        failed_generations=sum(r["finish_reason"].startswith("error") for r in records),
        records=list(records),
    )


def summary_table(report: EvalReport, policy: str) -> Table:
    """The rich table ``claw-eval`` prints."""
    table = Table(title=f"claw-eval · conversation · persona={report.persona} · policy={policy}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("problems (first reply each)", str(report.n))
    table.add_row("[bold]personalization score[/bold]", f"{report.score:.3f} ± {report.score_sd:.3f}")
    table.add_row("valid-reply rate", f"{report.valid_rate:.1%}")
    table.add_row("answer correct", f"{report.correct_rate:.1%}")
    for name, rate in report.preference_rates.items():
        table.add_row(f"  preference: {name}", f"{rate:.1%}")
    if report.failed_generations:
        table.add_row("[red]failed generations[/red]", str(report.failed_generations))
    return table


def write_report(report: EvalReport, out_dir: Path) -> list[Path]:
    """Per-problem JSONL and a summary JSON under ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = out_dir / f"conversation-{report.persona}.jsonl"
    with lines.open("w", encoding="utf-8") as fh:
        for record in report.records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    summary = out_dir / f"conversation-{report.persona}-summary.json"
    summary.write_text(json.dumps(report.summary(), indent=2) + "\n", encoding="utf-8")
    return [lines, summary]


def run(opts: EvalOptions) -> int:
    """``claw-eval --env conversation``: returns 0, 1 (the policy failed on every problem) or 2 (bad options)."""
    console = Console()
    if opts.responses is not None:
        console.print("[red]--responses is not supported for the conversation family; run a --policy.[/red]")
        return 2
    if opts.k != 1:
        console.print("note: --k is ignored here; the personalization score uses one first reply per problem")
    try:
        persona = load_persona(opts.persona)
        tasks = (
            load_gsm8k(opts.dataset, split=opts.split) if opts.dataset else ConversationEnv.default_tasks(opts.split)
        )
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        console.print(f"[red]{err}[/red]")
        return 2
    sampling = SamplingParams(max_new_tokens=opts.max_new_tokens, temperature=opts.temperature, seed=opts.seed)
    try:
        if opts.policy.startswith("scripted:"):
            from claw_train.evaluation.scripted import ScriptedPolicy

            policy: Policy = ScriptedPolicy.from_spec(opts.policy, persona, first_distinct(tasks, opts.n))
        else:
            from claw_train.policy.loader import load_policy

            policy = load_policy(model=opts.model, policy=opts.policy, family="conversation")
    except PolicyError as err:
        console.print(f"[red]cannot start policy {opts.policy!r}: {err}[/red]")
        return 2
    try:
        report = asyncio.run(_evaluate(policy, persona, tasks, sampling, opts))
    except ValueError as err:
        console.print(f"[red]{err}[/red]")
        return 2
    except PolicyError as err:
        console.print(f"[red]policy failed: {err}[/red]")
        return 1
    console.print(summary_table(report, opts.policy))
    if opts.output_dir is not None:
        for path in write_report(report, opts.output_dir):
            console.print(f"wrote {path}")
    if report.failed_generations == report.n:
        console.print(f"[red]every generation failed, e.g. {report.records[0]['finish_reason']}[/red]")
        return 1
    return 0


async def _evaluate(
    policy: Policy, persona: Persona, tasks: TaskSource, sampling: SamplingParams, opts: EvalOptions
) -> EvalReport:
    try:
        return await personalization_eval(
            policy,
            persona=persona,
            n=opts.n,
            seed=opts.seed,
            sampling=sampling,
            tasks=tasks,
            concurrency=opts.concurrency,
        )
    finally:
        await policy.aclose()
