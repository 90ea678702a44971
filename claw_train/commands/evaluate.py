"""`claw-eval`: score a policy (or a file of responses) on held-out tasks of any env family.

Every family gets the generic evaluation (mean outcome, success rate = avg@k, pass@k, bootstrap intervals,
one JSONL record per episode); a family's spec may name an extension that adds its own metrics. Options come
from the config tree (:mod:`claw_train.options.tree`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from claw_train.options.argv import parse
from claw_train.options.resolve import check_model, resolve
from claw_train.options.tree import ConfigError, EvalArgs
from claw_train.runlog.progress import Progress

EXAMPLES = """\
examples:
  claw-eval --env conversation --persona student --eval-n 32
  claw-eval --env toolcall --tasks aime2024 --eval-k 8 --policy openai://127.0.0.1:30000 --model Qwen/Qwen3-4B
  claw-eval --env toolcall --tasks aime2024 --responses answers.jsonl
  claw-eval --env swe --predictions predictions.jsonl
  claw-eval --env terminal --model runs/terminal-combined/checkpoints/checkpoint-16
  claw-eval --sessions runs/serve                    # a claw-serve run: replies that break their users' hints
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse options, run the family's evaluation, print a table; returns the exit code."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    console = Console(stderr=False, soft_wrap=True)  # a piped log keeps each message on one line
    try:
        args = parse(EvalArgs, argv, prog="claw-eval", description=f"{EvalArgs.__doc__}\n\n{EXAMPLES}")
        from claw_train.options.families import apply_sandbox_isolation, check_env_options, spec_for, tasks_for

        if args.sessions is not None:
            return _sessions(args, console)

        spec = spec_for(args.run.env)
        args = resolve(args, spec, command="eval")
        check_env_options(spec, args.rollout)
        sandbox_note = apply_sandbox_isolation(args.rollout)
        check_model(args, hub=True)
        tasks = tasks_for(spec, args.rollout.tasks, args.evaluation.eval_split)
        report = _report(args, spec, tasks, console)
    except ConfigError as err:
        console.print(f"[red]claw-eval:[/red] {escape(str(err))}")
        return 2
    except _Failed as err:
        console.print(f"[red]claw-eval:[/red] {escape(str(err))}")
        return 1
    from claw_train.evaluation import write_report

    out_dir = args.run.output_dir or Path("runs") / "eval" / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    paths = write_report(report, out_dir)
    console.print(summary_table(report.summary, spec.name, _extension(args, spec)))
    if sandbox_note:
        console.print(f"[yellow]{escape(sandbox_note)}[/yellow]")
    console.print(f"per-episode records: {paths[0]}   summary: {paths[1]}", markup=False)
    if report.summary.get("failed_generations") == report.summary.get("samples"):
        first = next((r.get("generation_error") for r in report.records if r.get("generation_error")), "?")
        console.print(f"[red]every generation failed, e.g. {escape(str(first))}[/red]")
        return 1
    return 0


def _sessions(args: EvalArgs, console: Console) -> int:
    """``--sessions RUN_DIR``: the hint check of a served run (:mod:`claw_train.evaluation.sessions`)."""
    from claw_train.evaluation.sessions import SessionsError, check_sessions, report_lines
    from claw_train.options.families import spec_for
    from claw_train.policy.base import PolicyError
    from claw_train.runlog.checkpoints import read_json

    run_dir = Path(args.sessions)
    options = read_json(run_dir / "run.json")
    if options is None:
        raise ConfigError(f"--sessions {run_dir}: not a run folder (no readable run.json)")
    try:
        spec = spec_for(args.run.env or options.get("env"), personal=True)
        tokens = args.rollout.max_new_tokens or spec.training.max_new_tokens
        report = asyncio.run(check_sessions(run_dir, spec, max_new_tokens=tokens, seed=args.evaluation.eval_seed))
    except (SessionsError, PolicyError, ValueError) as err:
        raise ConfigError(f"--sessions {run_dir}: {err}") from None
    for line in report_lines(report):
        console.print(line, markup=False, highlight=False)
    console.print(f"written to {run_dir / 'sessions_check.json'} (claw-view shows it)", markup=False)
    return 0


class _Failed(Exception):
    """The evaluation ran but produced nothing to score (exit code 1)."""


def _extension(args: EvalArgs, spec: Any) -> Any:
    from claw_train.evaluation.runner import env_options, extension_for

    try:
        return extension_for(spec, env_options(spec, vars(args.rollout)))
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err)) from None


def _report(args: EvalArgs, spec: Any, tasks: Any, console: Console) -> Any:
    from claw_train.evaluation import evaluate, grade_file
    from claw_train.options.families import env_kwargs_for
    from claw_train.policy.base import PolicyError, SamplingParams

    ext = _extension(args, spec)
    ev = args.evaluation
    if args.responses is not None and args.predictions is not None:
        raise ConfigError("give --responses or --predictions, not both")
    for flag, path in (("--responses", args.responses), ("--predictions", args.predictions)):
        if path is not None:
            try:
                return grade_file(ext, path, tasks, ev.eval_k, ev.eval_seed)
            except ValueError as err:
                raise ConfigError(f"{flag}: {err}") from None
    policy = _policy(args, spec, ext, tasks)
    sampling = SamplingParams(max_new_tokens=args.rollout.max_new_tokens, temperature=ev.eval_temperature)
    total = len(ext.select(tasks, ev.eval_n)) * ev.eval_k
    progress = Progress(f"{spec.name}: {total} episodes", total, console=console)

    async def go() -> Any:
        try:
            return await evaluate(
                policy,
                spec,
                tasks,
                n=ev.eval_n,
                k=ev.eval_k,
                seed=ev.eval_seed,
                sampling=sampling,
                concurrency=args.rollout.rollout_workers or 8,
                extension=ext,
                env_kwargs=env_kwargs_for(spec, args.rollout),
                on_episode=progress.advance,
            )
        finally:
            await policy.aclose()

    try:
        with progress:
            return asyncio.run(go())
    except PolicyError as err:
        raise _Failed(f"policy failed: {err}") from None
    except ValueError as err:
        raise _Failed(str(err)) from None


def _policy(args: EvalArgs, spec: Any, ext: Any, tasks: Any) -> Any:
    from claw_train.policy.base import PolicyError

    policy = args.run.policy
    try:
        if policy.startswith("scripted:"):
            from claw_train.evaluation.scripted import ScriptedPolicy

            return ScriptedPolicy(
                ext.scripted(policy.removeprefix("scripted:"), ext.select(tasks, args.evaluation.eval_n))
            )
        from claw_train.policy.loader import load_policy

        how = {"dtype": args.run.serve_dtype} if policy == "inprocess" else {}
        return load_policy(model=args.run.model, policy=policy, family=spec.name, warm_start=args.run.warm_start, **how)
    except (PolicyError, ValueError) as err:
        raise ConfigError(f"--policy {policy}: {err}") from None


def summary_table(summary: dict[str, Any], family: str, ext: Any) -> Table:
    """The table ``claw-eval`` prints: the generic metrics with intervals, then the family's rows."""
    k = summary["k"]
    table = Table(title=escape(f"claw-eval · {family}"))
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI (bootstrap over tasks)", justify="right")
    table.add_row("tasks × samples", f"{summary['tasks']} × {k}", "")
    rows = (
        ("score", f"[bold]{ext.score_name}[/bold]", "{:.3f}"),
        ("success_rate", f"success rate (avg@{k})", "{:.1%}"),
        ("pass_at_k", f"pass@{k}", "{:.1%}"),
    )
    for key, label, fmt in rows:
        low, high = summary[f"{key}_ci95"]
        table.add_row(label, fmt.format(summary[key]), f"{fmt.format(low)} – {fmt.format(high)}")
    if summary.get("action_rate") is not None:
        rate = f"{summary['action_rate']:.1%} of turns, {summary['acting_episodes']:.0%} of episodes"
        table.add_row("actions carried out (format)", rate, "")
    for label, value in ext.rows(summary):
        table.add_row(escape(label), value, "")
    if summary.get("infra_failures"):
        table.add_row("[red]infrastructure failures (not counted)[/red]", str(summary["infra_failures"]), "")
    if summary.get("failed_generations"):
        table.add_row("[red]failed generations (empty replies)[/red]", str(summary["failed_generations"]), "")
    if summary["k"] != summary["k_requested"]:
        table.add_row(f"[yellow]k lowered from {summary['k_requested']}[/yellow]", "fewest samples per task", "")
    return table


def app() -> None:
    """Console entry point."""
    sys.exit(main())
