"""`claw-eval`: score a policy (or a file of responses) on held-out tasks of one env family."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated

import typer

from claw_train.evaluation import EvalOptions

app = typer.Typer(
    add_completion=False, rich_markup_mode=None, help="Evaluate a policy on held-out tasks of an env family."
)


@app.command()
def main(
    env: Annotated[str, typer.Option(help="Env family: conversation, toolcall, …")],
    model: Annotated[str, typer.Option(help="'tiny', a Hugging Face id or a local path.")] = "tiny",
    policy: Annotated[
        str, typer.Option(help="inprocess | sglang://HOST:PORT | openai://HOST:PORT | scripted:NAME")
    ] = "inprocess",
    persona: Annotated[str, typer.Option(help="Conversation env: simulated user persona.")] = "student",
    dataset: Annotated[
        str | None, typer.Option(help="Dataset name (aime2024, gsm8k, …) or a JSONL/parquet path.")
    ] = None,
    split: Annotated[str, typer.Option(help="Task split to evaluate on.")] = "test",
    n: Annotated[int, typer.Option(help="Number of problems (families with unlimited tasks).")] = 32,
    k: Annotated[int, typer.Option(help="Samples per problem (avg@k, pass@k).")] = 1,
    seed: Annotated[int, typer.Option(help="Sampling seed (fixed for comparable runs).")] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Generation budget per turn.")] = 512,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight at once.")] = 8,
    responses: Annotated[
        Path | None, typer.Option(help="Grade a JSONL of precomputed responses instead of running a model.")
    ] = None,
    output_dir: Annotated[Path | None, typer.Option(help="Where per-problem JSONL and the summary go.")] = None,
) -> None:
    """Run the family's evaluation and print a summary table."""
    import claw_envs

    try:
        env_id = claw_envs.resolve_id(env)
    except KeyError as err:
        raise typer.BadParameter(str(err.args[0]), param_hint="--env") from None
    family = claw_envs.env_class(env_id).family
    try:
        module = importlib.import_module(f"claw_train.evaluation.{family}")
    except ModuleNotFoundError:
        typer.echo(f"claw-eval has no evaluation for the {family!r} family yet.", err=True)
        raise typer.Exit(2) from None
    opts = EvalOptions(
        env=env_id,
        model=model,
        policy=policy,
        persona=persona,
        dataset=dataset,
        split=split,
        n=n,
        k=k,
        seed=seed,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        concurrency=concurrency,
        responses=responses,
        output_dir=output_dir,
    )
    raise typer.Exit(module.run(opts))
