"""What a run reports: held-out evaluations on schedule (``--eval-every`` / ``--eval-at``, through the generic
evaluator and the family's extension), the learning curve and ``summary.json``."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from claw_train.families import env_kwargs_for, tasks_for

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline, PipelineResult


def eval_due(p: Pipeline, step: int) -> bool:
    """Whether version ``step`` is due for a held-out evaluation."""
    if any(e["update"] == step for e in p.evals):
        return False
    if p.eval_at:
        return step in p.eval_at
    return bool(p.eval_every) and step % p.eval_every == 0


async def evaluate(p: Pipeline, step: int) -> None:
    """Evaluate the serving policy (version ``step``) on held-out tasks; record and print the row."""
    from claw_train.evaluation import evaluate as run_evaluation
    from claw_train.evaluation.runner import env_options, extension_for

    ev = p.evaluation
    kwargs = env_kwargs_for(p.spec, p.rollout)
    extension = extension_for(p.spec, env_options(p.spec, kwargs))
    report = await run_evaluation(
        p.policy.inner,
        p.spec,
        tasks_for(p.spec, p.rollout.tasks, ev.eval_split),
        n=ev.eval_n,
        k=ev.eval_k,
        seed=ev.eval_seed,
        sampling=dataclasses.replace(p.sampling, seed=ev.eval_seed),
        extension=extension,
        env_kwargs=kwargs,
    )
    names = {"score_name": extension.score_name, "success_name": extension.success_name}
    row = {"update": step, "version": p.policy.version, **names, **report.summary}
    p.evals.append(row)
    p.stats.last_eval = row
    p.rundir.add_eval(row)
    p.log.write(step, {"kind": "eval", **row})
    for record in report.records:  # each held-out episode with its chat: what claw-view compares across versions
        p.log.write(step, {"kind": "eval_episode", "update": step, **record})
    p.say(eval_line(row))


def eval_line(row: dict[str, Any]) -> str:
    """One evaluation as a line of the run's output, named as the family names its score and its success."""
    name = row.get("score_name", "score")
    text = f"update {row['update']:>3}  held-out {name} {row['score']:.3f} ± {row['score_sd']:.3f}"
    text += f"  {row.get('success_name', 'success')} {row['success_rate']:.0%}"
    if "valid_rate" in row:
        text += f"  valid {row['valid_rate']:.0%}  correct {row['correct_rate']:.0%}"
    return text


def write_summary(p: Pipeline, result: PipelineResult) -> None:
    """The learning curve (PNG) and ``summary.json``."""
    from claw_train.plots import learning_curve

    ledger = p.rundir.ledger.effective()
    train_curve = [(u["update"], u.get("score_mean")) for u in ledger]
    try:
        learning_curve(p.out / "learning_curve.png", p.evals, train_curve, title=p.title())
    except Exception as err:  # a plot must not hide the run's result
        p.say(f"could not draw the learning curve: {err}")
    p.rundir.write_summary(
        {
            "status": result.status,
            "message": result.message,
            "updates": result.updates,
            "wall_time": round(result.wall_time, 1),
            **p.stats.totals(),
            "success_name": success_name(p.spec.evaluation),
            "paths": {
                "logs": str(p.out / "logs"),
                "ledger": str(p.rundir.ledger.path),
                "tensorboard": str(p.out / "tensorboard"),
                "learning_curve": str(p.out / "learning_curve.png"),
                "checkpoint": str(result.checkpoint) if result.checkpoint else None,
            },
            "evals": result.evals,
            "counters": result.counters,
            "checkpoint": str(result.checkpoint) if result.checkpoint else None,
        }
    )


def success_name(evaluation: str | None) -> str:
    """What the family's evaluation calls a success (its class's ``success_name``), read without building it."""
    from claw_envs.evaluation import Evaluation
    from claw_envs.spec import resolve

    try:
        return str(resolve(evaluation).success_name) if evaluation else Evaluation.success_name
    except (ImportError, AttributeError, ValueError):
        return Evaluation.success_name
