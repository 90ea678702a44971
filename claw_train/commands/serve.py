"""`claw-serve`: an OpenAI-compatible chat server that learns from the conversations it serves."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from claw_train import access
from claw_train.models.named import builds_here, first_use_line
from claw_train.options.argv import parse
from claw_train.options.resolve import check_model, resolve
from claw_train.options.tree import ConfigError, ServeArgs

HELP = """\
claw-serve: an OpenAI-compatible server (POST /v1/chat/completions, GET /v1/models, /healthz, /metrics) in front
of the policy. It learns while it serves: the next main-line request of a session is the next state of the
previous turn (the user's reply, tool results), judged and trained on in the background; new weights swap in
between requests. --env picks the personal-track family whose judges and signals read the chats.

Headers:
  X-Session-Id: ID       one conversation (else the request's "user" field; neither: served, never trained)
  X-Turn-Type: main|side main (default): part of the conversation, learned from;
                         side: a helper request (summaries, titles), served and logged, never trained
Replies carry X-Policy-Version (and system_fingerprint "claw-v<N>"). A request for another model name is
answered by this one with an X-Claw-Warning header. A trained turn samples at the trainer's temperature: a
request's own temperature/top_p there is not used, and the X-Claw-Sampling header says so (side turns and
--no-train sample as asked). Main turns of one session are served one at a time.

Security: it listens on 127.0.0.1 by default. With an API key (CLAW_API_KEY=secret, or --api-key; the
environment keeps it out of `ps`) every request but /healthz needs "Authorization: Bearer <key>" (401
otherwise); any non-loopback --host (0.0.0.0, a LAN address) is refused without one (exit 2). Without a key
it answers (403 otherwise) only a Host of localhost, *.localhost, 127.x.x.x or [::1], never looking a name up, and
an Origin, if sent, of such a host on its own port, so no web page elsewhere can use or train it. Request bodies
must be Content-Type: application/json (415 otherwise); over --max-body-bytes (4 MiB) they are refused with 413
before they are read.

curl:
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
    -H 'X-Session-Id: alice' -H 'X-Turn-Type: main' \\
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "What is 7 * 6?"}]}'

Python (openai):
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x",
                  default_headers={"X-Session-Id": "alice"})
  r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}])
  client.chat.completions.create(model="tiny", messages=[...],
                                 extra_headers={"X-Turn-Type": "side"})   # not trained

Ctrl-C or SIGTERM saves a checkpoint (when an update was made) and exits cleanly.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse options and serve until stopped; returns the exit code."""
    try:
        args = parse(ServeArgs, argv, prog="claw-serve", description=HELP)
        from claw_train.options.families import apply_sandbox_isolation, check_env_options, spec_for

        spec = spec_for(args.run.env, personal=True)
        args = resolve(args, spec, command="serve")
        check_env_options(spec, args.rollout)
        sandbox_note = apply_sandbox_isolation(args.rollout)
        check_model(args, hub=True)
    except ConfigError as err:
        print(f"claw-serve: {err}", file=sys.stderr)
        return 2
    key = access.api_key(args.serving.api_key)
    if refused := access.refusal(args.serving.host, key, exposes="use the model and train it"):
        print(f"claw-serve: {refused}", file=sys.stderr)  # before torch and the model load (~10 s)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "OMP_NUM_THREADS" in os.environ:  # the user's thread cap holds for the policy too
        os.environ.setdefault("CLAW_POLICY_THREADS", os.environ["OMP_NUM_THREADS"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
    if builds_here(args.run.model):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    from claw_train.pipeline import RunError
    from claw_train.serve import serve

    hf_logging.disable_progress_bar()

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    model_path = _prepare(args, spec, say)
    if isinstance(model_path, int):
        return model_path
    out = args.run.output_dir or "runs/serve"
    from claw_train.options.tree import replace

    args = replace(args, output_dir=out)

    viewers: list[Any] = []
    ready = _announcer(args, key, sandbox_note, viewers, say)

    try:
        result = asyncio.run(serve(args, on_ready=ready, model_path=model_path, on_message=say))
    except (RunError, ValueError) as err:
        say(f"claw-serve: {err}")
        return 2
    except KeyboardInterrupt:  # before the server took over Ctrl-C (loading the model)
        say("interrupted while starting")
        return 130
    finally:
        for viewer in viewers:
            viewer.close()
    counts = result.counters.get("counts", {})
    print(
        f"claw-serve stopped ({result.status}: {result.message}); {counts.get('requests', 0)} requests, "
        f"{result.updates} updates, checkpoint {result.checkpoint or 'none (no update made)'}"
    )
    print(json.dumps({"masked": result.counters.get("masked", {})}))
    return 0 if result.status in ("interrupted", "done") else 1


def _prepare(args: Any, spec: Any, say: Any) -> Any:
    """Checks that need the trainer's code (a misspelt ``--trainer`` option, a bad ``--replay-data`` file), then the
    model built here (``tiny``, a named model) when it is one: its folder, ``None`` for any other, or an exit code."""
    from claw_train.pipeline import RunError
    from claw_train.policy.base import PolicyError
    from claw_train.training.options import trainer_extras
    from claw_train.training.replay import replay_rows

    try:
        trainer_extras(args.training)
        replay_rows(args.training, spec, args.run.model)
    except (RunError, ConfigError) as err:
        say(f"claw-serve: {err}")
        return 2
    if not builds_here(args.run.model):
        return None
    from claw_train.policy.loader import resolve_model

    say(first_use_line(args.run.model))
    try:
        return resolve_model(args.run.model, family=spec.name, progress=True, say=say, warm_start=args.run.warm_start)
    except PolicyError as err:
        say(f"cannot build the {args.run.model} model: {err}")
        return 1


def _announcer(args: Any, key: str, sandbox_note: str | None, viewers: list[Any], say: Any) -> Any:
    """What runs once the server listens: the page beside it with ``--view``, and where to point a client."""
    from claw_train.serve.app import API_KEY_ENV

    out = args.run.output_dir

    def ready(url: str, _pipeline: object) -> None:
        if args.view:
            from claw_train.view.launch import Beside

            try:
                viewers.append(Beside(Path(out)))
                print(f"claw-view: {viewers[0].url}  (this server's run folder, live)")
            except RuntimeError as err:
                say(f"claw-serve --view: {err}")
        training = "learning" if args.serving.train else "not training"
        print(f"claw-serve: serving {args.serving.served_model or args.run.model} at {url}  ({training})")
        shown = f'os.environ["{API_KEY_ENV}"]' if key else '"x"'
        headers = '{"X-Session-Id": "me"}'
        print(f'  point a client at it: OpenAI(base_url="{url}", api_key={shown}, default_headers={headers})')
        if not key:
            print("  no API key: anyone on this machine can use it (and train it); see --api-key")
        print(f"  logs and checkpoints: {out}   metrics: {url[:-3]}/metrics   Ctrl-C: checkpoint and exit")
        if sandbox_note:
            print(f"  {sandbox_note}")
        sys.stdout.flush()  # a log file or a pipe sees the URL at once

    return ready


def app() -> None:
    """Console entry point."""
    sys.exit(main())
