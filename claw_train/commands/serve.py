"""`claw-serve`: an OpenAI-compatible chat server that learns from the conversations it serves."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

HELP = """\
An OpenAI-compatible server (POST /v1/chat/completions, GET /v1/models, /healthz, /metrics) in front of the
policy. It learns while it serves: the next main-line request of a session is the next state of the previous
turn (the user's reply, tool results), judged and trained on in the background; new weights swap in between
requests.

\b
Headers:
  X-Session-Id: ID       one conversation (else the request's "user" field; neither: served, never trained)
  X-Turn-Type: main|side main (default): part of the conversation, learned from;
                         side: a helper request (summaries, titles), served and logged, never trained
Replies carry X-Policy-Version (and system_fingerprint "claw-v<N>"). A request for another model name is
answered by this one with an X-Claw-Warning header. Main turns of one session are served one at a time.

\b
curl:
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
    -H 'X-Session-Id: alice' -H 'X-Turn-Type: main' \\
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "What is 7 * 6?"}]}'

\b
Python (openai):
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x",
                  default_headers={"X-Session-Id": "alice"})
  r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}])
  client.chat.completions.create(model="tiny", messages=[...],
                                 extra_headers={"X-Turn-Type": "side"})   # not trained

Ctrl-C or SIGTERM saves a checkpoint (when an update was made) and exits cleanly.
"""

app = typer.Typer(add_completion=False, help=HELP, rich_markup_mode=None)


@app.command(help=HELP)
def main(
    model: Annotated[str, typer.Option(help="'tiny', a Hugging Face id or a local path.")] = "tiny",
    policy: Annotated[str, typer.Option(help="inprocess | sglang://HOST:PORT[,HOST:PORT]")] = "inprocess",
    judge: Annotated[str, typer.Option(help="rules | policy | openai://HOST:PORT")] = "rules",
    method: Annotated[str, typer.Option(help="binary | opd | combined")] = "combined",
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free port).")] = 8000,
    output_dir: Annotated[Path, typer.Option(help="Logs (JSONL per policy version) and checkpoints.")] = Path(
        "runs/serve"
    ),
    updates_per_checkpoint: Annotated[int, typer.Option(help="Checkpoint every K updates.")] = 4,
    samples_per_step: Annotated[int, typer.Option(help="Judged turns per optimizer update.")] = 16,
    max_staleness: Annotated[
        int, typer.Option(help="Train on a turn at most this many updates after the policy version that wrote it.")
    ] = 8,
    max_new_tokens: Annotated[int, typer.Option(help="Cap on a reply's tokens (max_tokens is clamped).")] = 256,
    session_timeout: Annotated[
        float, typer.Option(help="Seconds of silence that close a session's last turn (not trained).")
    ] = 1800.0,
    request_timeout: Annotated[
        float, typer.Option(help="Seconds before a request the policy has not answered is a 503.")
    ] = 120.0,
    train: Annotated[bool, typer.Option("--train/--no-train", help="Learn from sessions, or only serve.")] = True,
    resume: Annotated[bool, typer.Option(help="Continue the run in --output-dir from its last checkpoint.")] = False,
    lr: Annotated[float | None, typer.Option(help="Learning rate (default: the model's preset).")] = None,
) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
    from transformers.utils import logging as hf_logging

    from claw_train.pipeline import RunError
    from claw_train.policy.base import PolicyError
    from claw_train.proxy import ServeConfig, serve

    hf_logging.disable_progress_bar()
    try:
        cfg = ServeConfig(
            env="conversation",
            model=model,
            policy=policy,
            judge=judge,
            method=method,
            host=host,
            port=port,
            output_dir=output_dir,
            checkpoint_every=updates_per_checkpoint,
            samples_per_step=samples_per_step,
            max_staleness=max_staleness,
            max_new_tokens=max_new_tokens,
            session_timeout=session_timeout,
            request_timeout=request_timeout,
            train=train,
            resume=resume,
            trainer={"learning_rate": lr} if lr is not None else {},
        )
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    model_path = None
    if model == "tiny":
        from claw_train.policy.loader import resolve_model

        typer.echo("tiny model: the cached build, or a few minutes to build and bootstrap it on first use", err=True)
        try:
            model_path = resolve_model("tiny", family="conversation", progress=False)
        except PolicyError as err:
            typer.echo(f"cannot build the tiny model: {err}", err=True)
            raise typer.Exit(1) from None

    def ready(url: str, _pipeline: object) -> None:
        typer.echo(f"claw-serve: serving {cfg.served_model} at {url}  ({'learning' if train else 'not training'})")
        typer.echo(
            f'  point a client at it: OpenAI(base_url="{url}", api_key="x", default_headers={{"X-Session-Id": "me"}})'
        )
        typer.echo(f"  logs and checkpoints: {output_dir}   metrics: {url[:-3]}/metrics   Ctrl-C: checkpoint and exit")
        sys.stdout.flush()  # a log file or a pipe sees the URL at once

    try:
        result = asyncio.run(serve(cfg, on_ready=ready, model_path=model_path, on_message=typer.echo))
    except RunError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # before the server took over Ctrl-C (loading the model)
        typer.echo("interrupted while starting", err=True)
        raise typer.Exit(130) from None
    counts = result.counters.get("counts", {})
    typer.echo(
        f"claw-serve stopped ({result.status}: {result.message}); {counts.get('requests', 0)} requests, "
        f"{result.updates} updates, checkpoint {result.checkpoint or 'none (no update made)'}"
    )
    typer.echo(json.dumps({"masked": result.counters.get("masked", {})}))
    raise typer.Exit(0 if result.status in ("interrupted", "done") else 1)
