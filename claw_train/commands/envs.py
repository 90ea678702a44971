"""`claw-envs`: list the registered environments and watch scripted episodes' next-state signals."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="List, try and judge claw environments.")
console = Console()


@app.command("list")
def list_envs() -> None:
    """Print every registered env id with its family and task counts per split."""
    import claw_envs

    table = Table("id", "family", "train tasks", "test tasks")
    for env_id in claw_envs.env_ids():
        cls = claw_envs.env_class(env_id)
        counts = []
        for split in ("train", "test"):
            try:
                counts.append(cls.default_tasks(split).describe())
            except Exception as err:  # a listing must not die on one family
                counts.append(f"[red]{type(err).__name__}[/red]")
        table.add_row(env_id, cls.family, *counts)
    console.print(table)


@app.command()
def demo(
    env: Annotated[list[str] | None, typer.Option(help="Env ids (default: every registered env).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the task draw.")] = 0,
) -> None:
    """Run one scripted episode per env: a junk action, then the env's reference action; print the signals."""
    import gymnasium as gym

    import claw_envs

    for env_id in env or claw_envs.env_ids():
        env_obj = gym.make(claw_envs.resolve_id(env_id))
        try:
            obs, info = env_obj.reset(seed=seed)
            console.rule(f"[bold]{env_id}[/bold]  task {info['task_id']}")
            console.print(f"[cyan]observation:[/cyan] {str(obs)[:300]}")
            for action in ("???", env_obj.unwrapped.reference_action()):
                if action is None:
                    continue
                obs, reward, terminated, truncated, info = env_obj.step(action)
                ns = info["next_state"]
                console.print(f"[magenta]action:[/magenta] {action[:200]!r}")
                console.print(
                    f"  next state ({ns.role}, step {ns.step_index}): {ns.text[:300]!r}\n"
                    f"  evaluative {ns.evaluative.score:+.1f} {list(ns.evaluative.tags)}  "
                    f"directive {ns.directive!r}  outcome {ns.outcome}  reward {reward}  status {info['status']}"
                )
                if terminated or truncated:
                    break
        finally:
            env_obj.close()
