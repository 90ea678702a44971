"""The evaluator every family gets: ``k`` episodes of a policy on each of ``n`` held-out tasks through an
:class:`~claw_envs.pool.EnvPool`, scored by the family's :class:`~claw_envs.evaluation.Evaluation` (the generic
one, or the extension its spec names). ``claw-eval`` and ``claw-train --eval-every`` both call :func:`evaluate`.

Seeds: episode ``j`` of task ``i`` uses env seed ``seed + i*k + j`` and samples turn ``t`` with seed
``seed + i*k + j + (t-1)*1_000_003``, so evaluations of different policy versions see the same episodes.
A generation that fails counts as an empty reply (``failed_generation``), never as a crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_envs import FamilySpec
from claw_envs.episodes import EpisodeResult
from claw_envs.evaluation import Evaluation
from claw_envs.pool import EnvPool
from claw_envs.spec import resolve
from claw_envs.tasks import Task, TaskSource
from claw_train.agent_loop import action_text
from claw_train.evaluation.metrics import summarize
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.runlog.logs import json_line

TURN_SEED_STRIDE = 1_000_003


@dataclass
class EvalReport:
    """An evaluation: the summary metrics and one record per episode."""

    summary: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)


def extension_for(spec: FamilySpec, options: Mapping[str, Any] | None = None) -> Evaluation:
    """The family's evaluation extension (or the generic evaluation)."""
    cls = resolve(spec.evaluation) if spec.evaluation else Evaluation
    return cls(options)


def env_options(spec: FamilySpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """The run options a family's env takes by name (``FamilySpec.env_options``), from ``values``."""
    return {name: values[name] for name in spec.env_options if values.get(name) is not None}


async def evaluate(
    policy: Policy,
    spec: FamilySpec,
    tasks: TaskSource,
    *,
    n: int,
    k: int,
    seed: int,
    sampling: SamplingParams,
    concurrency: int = 8,
    extension: Evaluation | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    on_episode: Callable[[], None] = lambda: None,
) -> EvalReport:
    """Run and score ``k`` episodes on each of the first ``n`` held-out tasks (see the module docstring)."""
    ext = extension or extension_for(spec)
    chosen = ext.select(tasks, n)
    if not chosen:
        raise ValueError("no tasks to evaluate (n must be at least 1 and the split non-empty)")
    kwargs = {"tasks": tasks, "split": tasks.split, **(env_kwargs or {}), **ext.env_kwargs()}
    requests = [(i, j, task) for i, task in enumerate(chosen) for j in range(k)]
    async with EnvPool(spec.env_id, max(1, concurrency), env_kwargs=kwargs) as pool:

        async def one(i: int, j: int, task: Task) -> dict[str, Any]:
            episode_seed = seed + i * k + j
            failures: list[str] = []

            async def agent(obs: Any, info: dict[str, Any]) -> str:
                turn = sum(m.get("role") == "assistant" for m in info["messages"])
                params = dataclasses.replace(sampling, seed=episode_seed + turn * TURN_SEED_STRIDE)
                try:
                    return action_text(await policy.generate(info["messages"], params))
                except PolicyError as err:
                    failures.append(str(err))
                    return ""

            result = await pool.run_episode(agent, seed=episode_seed, options={"task_id": task.id})
            on_episode()
            return episode_record(result, task, j, ext, failures)

        records = list(await asyncio.gather(*(one(i, j, t) for i, j, t in requests)))
    summary = summarize(records, k, seed)
    graded = [r for r in records if r["status"] == "ok"]
    summary |= ext.summary(graded)
    return EvalReport(summary=summary, records=records)


def episode_record(
    result: EpisodeResult, task: Task, sample: int, ext: Evaluation, failures: Sequence[str] = ()
) -> dict[str, Any]:
    """One episode as a record: the generic fields, then the extension's, then its whole chat (``messages``)."""
    steps = [info["next_state"] for info in result.infos if "next_state" in info]
    outcome = steps[-1].outcome if steps else None
    record = {
        "task_id": task.id,
        "sample": sample,
        "outcome": outcome,
        "success": result.status == "ok" and outcome is not None and outcome >= ext.success_at,
        "turns": len(result.actions),
        "actions_carried_out": sum(bool(ns.action_taken) for ns in steps),
        "status": result.status,
        "error": result.error,
        "failed_generation": bool(failures),
    }
    if failures:
        record["generation_error"] = failures[0]
    if result.status == "ok":
        record |= ext.record(result)
    record["messages"] = transcript(result)
    return record


def transcript(result: EpisodeResult) -> list[dict[str, Any]]:
    """The episode's whole chat (its last info's messages; the env's own form, e.g. OpenAI ``tool_calls``), with the
    final reply appended when the env's history stops before it (an episode ended by its last action)."""
    messages = next((list(info["messages"]) for info in reversed(result.infos) if "messages" in info), [])
    replies = sum(m.get("role") == "assistant" for m in messages)
    if result.actions and replies < len(result.actions):
        messages.append({"role": "assistant", "content": result.actions[-1]})
    return messages


def grade_file(ext: Evaluation, path: Path, tasks: TaskSource, k: int, seed: int) -> EvalReport:
    """Score a file of precomputed responses (``--responses``) with the extension's grader."""
    records = ext.grade_responses(path, tasks)
    summary = summarize(records, k, seed) | ext.summary(records)
    return EvalReport(summary=summary, records=records)


def write_report(report: EvalReport, out_dir: Path) -> list[Path]:
    """``episodes.jsonl`` (one record per episode or response) and ``summary.json``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = out_dir / "episodes.jsonl"
    with lines.open("w", encoding="utf-8") as fh:
        for record in report.records:
            fh.write(json_line(record))
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps(report.summary, indent=2, default=str) + "\n", encoding="utf-8")
    return [lines, summary]
