"""`claw-train`: learn online from next-state signals while the policy keeps serving.

Examples::

    claw-train --env conversation --updates 16                 # tiny model, CPU, student persona, combined
    claw-train --env toolcall --method binary --updates 2
    claw-train --env terminal --updates 2
    claw-train --env conversation --model Qwen/Qwen3-4B --policy sglang://10.0.0.5:30000 \\
        --judge openai://10.0.0.6:8000 --lora --updates 200

``--config file.yaml`` holds any of the options below (names with underscores) plus a ``trainer:``
mapping of ClawConfig/GRPOConfig fields (``learning_rate``, ``max_staleness``, …); flags given on
the command line win over the file.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, help="Learn online from next-state signals (Binary RL, OPD, Combined).")

FAMILIES = ("conversation", "terminal", "swe", "toolcall", "gui", "echo")
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "conversation": {"method": "combined", "max_new_tokens": 96, "rollout_workers": 8, "eval_every": 4},
    "toolcall": {"method": "combined", "max_new_tokens": 256, "max_turns": 4, "group_size": 4, "eval_every": 0},
    "terminal": {"method": "combined", "max_new_tokens": 128, "max_turns": 4, "group_size": 4, "eval_every": 0},
    "echo": {"method": "combined", "max_new_tokens": 48, "group_size": 4, "eval_every": 0},
}
GENERIC_DEFAULTS: dict[str, Any] = {"method": "combined", "eval_every": 0}
ISSUE_FOR = {"swe": "the SWE env issue", "gui": "the GUI env issue"}


def _load_config_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise typer.BadParameter(f"cannot read {path}: {err}", param_hint="--config") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path} must hold a mapping of options", param_hint="--config")
    return {k.replace("-", "_"): v for k, v in data.items()}


@app.command()
def main(
    ctx: typer.Context,
    env: Annotated[str, typer.Option(help="Env family: conversation, toolcall, echo, terminal, swe, gui.")],
    method: Annotated[str | None, typer.Option(help="binary | opd | combined (default per env).")] = None,
    model: Annotated[str, typer.Option(help="'tiny', a Hugging Face id or a local path.")] = "tiny",
    policy: Annotated[str, typer.Option(help="inprocess | sglang://HOST:PORT[,HOST:PORT]")] = "inprocess",
    judge: Annotated[str, typer.Option(help="rules | policy | openai://HOST:PORT")] = "rules",
    updates: Annotated[int, typer.Option(help="Optimizer updates to run.")] = 16,
    output_dir: Annotated[Path | None, typer.Option(help="Run directory (logs, checkpoints, plots).")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with options and a 'trainer:' section.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --output-dir from its last checkpoint.")] = False,
    lora: Annotated[bool, typer.Option(help="Train LoRA adapters (PEFT) instead of all weights.")] = False,
    sync: Annotated[bool, typer.Option(help="Roll out, judge and train one after another (for comparison).")] = False,
    eval_every: Annotated[int | None, typer.Option(help="Held-out evaluation every N updates (0: never).")] = None,
    eval_n: Annotated[int, typer.Option(help="Held-out problems per evaluation.")] = 32,
    persona: Annotated[str, typer.Option(help="Conversation env: the simulated user.")] = "student",
    seed: Annotated[int, typer.Option(help="Seed for episodes and the trainer.")] = 0,
    lr: Annotated[float | None, typer.Option(help="Learning rate (default: the model's preset).")] = None,
    checkpoint_every: Annotated[int, typer.Option(help="Checkpoint every K updates.")] = 4,
    display: Annotated[bool, typer.Option(help="Live status display.")] = True,
) -> None:
    """Run the online trainer and print a summary (and the evaluation curve) at the end."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not sync:
        # serving and training run at once: give each half the cores instead of letting their OpenMP teams fight
        # (set before torch is imported; measured on 2 cores: 4 async updates 41 s -> 32 s)
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
    from rich.console import Console

    import claw_envs

    console = Console(soft_wrap=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the live display says what is going on
    family = env.lower().removeprefix("claw/").split("-v")[0]
    try:
        env_id = claw_envs.resolve_id(env)
        family = claw_envs.env_class(env_id).family
    except KeyError:
        if family in ISSUE_FOR:
            console.print(
                f"[red]the {family!r} env family has not landed yet ({ISSUE_FOR[family]}); "
                f"available now: {', '.join(sorted(_landed()))}[/red]"
            )
            raise typer.Exit(2) from None
        known = ", ".join(sorted(_landed()))
        raise typer.BadParameter(f"unknown env {env!r}; available: {known}", param_hint="--env") from None
    values = {**ENV_DEFAULTS.get(family, GENERIC_DEFAULTS), **_load_config_file(config)}
    given = {
        "method": method,
        "model": model,
        "policy": policy,
        "judge": judge,
        "updates": updates,
        "resume": resume,
        "lora": lora,
        "sync": sync,
        "eval_every": eval_every,
        "eval_n": eval_n,
        "persona": persona,
        "seed": seed,
        "checkpoint_every": checkpoint_every,
    }
    for key, value in given.items():  # flags typed on the command line win over the file and the env defaults
        source = ctx.get_parameter_source(key)
        explicit = source is not None and source.name != "DEFAULT"
        if explicit or (key not in values and value is not None):
            values[key] = value
    if lr is not None:
        values.setdefault("trainer", {})["learning_rate"] = lr
    values["env"] = env_id
    values["output_dir"] = output_dir or values.get("output_dir") or Path("runs") / f"{family}-{values['method']}"
    from claw_train.pipeline import Pipeline, PipelineConfig, RunError

    try:
        cfg = PipelineConfig(**values)
    except (TypeError, ValueError) as err:
        raise typer.BadParameter(str(err)) from None
    model_path = None
    if cfg.model == "tiny":
        from claw_train.policy.loader import resolve_model

        console.print("tiny model: the cached build, or a few minutes to build and bootstrap it on first use")
        model_path = resolve_model("tiny", family=family, progress=console.is_terminal)
    try:
        pipeline = Pipeline(cfg, model_path=model_path, on_message=lambda text: console.print(text))
        result = asyncio.run(_run(pipeline, console, display))
    except RunError as err:
        console.print(f"[red]{err}[/red]")
        raise typer.Exit(2) from None
    from claw_train.plots import summary_table

    summary = json.loads((cfg.output_dir / "summary.json").read_text())
    console.print(summary_table(summary, title=f"claw-train · {pipeline._title()}"))
    if result.evals:
        console.print(curve(result.evals))
    console.print(f"learning curve: {cfg.output_dir / 'learning_curve.png'}   logs: {cfg.output_dir / 'logs'}")
    raise typer.Exit(result.exit_code)


def curve(evals: list[dict[str, Any]], width: int = 40) -> str:
    """The held-out score by update as text bars (what ``make demo`` ends with)."""
    lines = ["personalization score (first reply to held-out problems) by update:"]
    for e in evals:
        filled = round(max(0.0, min(1.0, e["score"])) * width)
        bar = "█" * filled + "·" * (width - filled)
        lines.append(f"  update {e['update']:>3}  {bar}  {e['score']:.3f}  (valid {e.get('valid_rate', 0):.0%})")
    if len(evals) > 1:
        lines.append(f"  change: {evals[-1]['score'] - evals[0]['score']:+.3f}")
    return "\n".join(lines)


def _landed() -> list[str]:
    import claw_envs

    return [claw_envs.env_class(i).family for i in claw_envs.env_ids()]


async def _run(pipeline: Any, console: Any, display: bool) -> Any:
    if not display or not console.is_terminal:
        return await pipeline.run()
    from rich.live import Live

    task = asyncio.create_task(pipeline.run())
    with Live(_status(pipeline.snapshot()), console=console, refresh_per_second=2, transient=True) as live:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            live.update(_status(pipeline.snapshot()))
    return task.result()


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
    t.add_row(
        "episodes",
        f"{counts.get('episodes', 0)}   turns {counts.get('turns', 0)}   elapsed {snap.get('elapsed', 0):.0f} s",
    )
    last = snap.get("last_eval")
    if last:
        t.add_row("last eval", f"update {last['update']}: {last['score']:.3f} (valid {last['valid_rate']:.0%})")
    return t
