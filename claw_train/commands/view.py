"""`claw-view`: a local web page over claw-train / claw-serve run folders, live while they run."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

HELP = """\
claw-view: a web page over run folders (claw-train's or claw-serve's --output-dir), updated while they run: the
held-out score, judge and masking rates, loss and the trainer's figures per update (several runs overlaid), every
turn with its prompt, votes, hint and decision (search and filter), each trained sample's tokens coloured by the
credit its method gave, and a before/after check. It only reads the folders (no lock, no write).

Security: it listens on 127.0.0.1 by default and, without a key, answers only requests whose Host is
localhost, *.localhost, 127.x.x.x or [::1] (never looking a name up) and whose Origin, if sent, is such a host on
its own port, so no web page elsewhere can read the runs. Any other --host needs an API key (CLAW_API_KEY=secret,
or --api-key); then open the page once as http://HOST:PORT/?key=<key>.

examples:
  claw-view runs/demo-20261201-101500
  claw-view runs/conversation-binary runs/conversation-opd runs/conversation-combined   # a bench, overlaid
  claw-train --env conversation --updates 16 --view                                     # beside a run
"""


@dataclass
class ViewArgs:
    """claw-view: a web page over run folders, live while they run."""

    run_dirs: Annotated[tuple[Path, ...], tyro.conf.Positional]
    """Run folders (claw-train's or claw-serve's --output-dir); several are overlaid."""
    host: str = "127.0.0.1"
    """Address to listen on (beyond loopback only with an API key)."""
    port: int = 8800
    """Port (0: any free port)."""
    api_key: str = ""
    """Key the page and API require (empty: $CLAW_API_KEY); required beyond loopback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Check the folders and the address, then serve until Ctrl-C; returns the exit code."""
    args = tyro.cli(ViewArgs, args=argv, prog="claw-view", description=HELP)
    from claw_train.access import api_key, refusal
    from claw_train.view.runs import NotARun, RunIndex
    from claw_train.view.server import ViewServer, listen

    def fail(message: str) -> int:
        print(f"claw-view: {message}", file=sys.stderr)
        return 2

    if not args.run_dirs:
        return fail("give at least one run folder (claw-train's or claw-serve's --output-dir)")
    if not 0 <= args.port <= 65535:
        return fail(f"--port must be a TCP port, 0 to 65535 (0: any free one), got {args.port}")
    key = api_key(args.api_key)
    if (message := refusal(args.host, key, exposes="read every prompt, reply and hint of these runs")) is not None:
        return fail(message)
    try:
        runs = [RunIndex(path, label=_label(path, args.run_dirs)) for path in args.run_dirs]
        sock = listen(args.host, args.port)
    except (NotARun, OSError) as err:
        return fail(str(err))

    def ready(url: str) -> None:
        print(f"claw-view: {url}{'?key=<key>' if key else ''}  ({len(runs)} run(s); Ctrl-C to stop)", flush=True)

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn stops on Ctrl-C, then raises it again
        ViewServer(runs, sock, key=key).run(ready)
    return 0


def _label(path: Path, every: Sequence[Path]) -> str:
    """A run's name on the page: its folder's name, with its parent's when two runs share one."""
    names = [p.resolve().name for p in every]
    name = path.resolve().name
    return f"{path.resolve().parent.name}/{name}" if names.count(name) > 1 else name


def app() -> None:
    """Console entry point."""
    sys.exit(main())
