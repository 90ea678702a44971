"""Shared test setup: offline, no hub, data from ../shared/data only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs workers side by side: one torch thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("CLAW_POLICY_THREADS", "1")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DURATIONS = json.loads(Path(__file__).with_name("durations.json").read_text())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``-n N --dist worksteal``, start every worker on its share of the longest tests.

    worksteal hands worker k the k-th contiguous run of the collection and later steals from the runs' ends, so a
    long test left late in a run is the last thing the suite waits for. The tests ``durations.json`` names (a
    measured run; ``tests/durations.py`` refreshes it) go, longest first, to the front of the run whose share of
    them is lightest; the rest keep pytest's order (module fixtures stay shared)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    sizes, left = [], len(items)
    for k in range(workers):  # worksteal's first split: each idle worker takes pending // workers still idle
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    long = sorted((i for i in items if i.nodeid in DURATIONS), key=lambda i: -DURATIONS[i.nodeid])
    runs: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for item in long:
        k = min((k for k in range(workers) if len(runs[k]) < sizes[k]), key=lambda k: load[k])
        runs[k].append(item)
        load[k] += DURATIONS[item.nodeid]
    rest = iter(i for i in items if i.nodeid not in DURATIONS)
    for k in range(workers):
        runs[k].extend(next(rest) for _ in range(sizes[k] - len(runs[k])))
    items[:] = [item for run in runs for item in run]


@pytest.fixture
def gsm8k_test_path() -> Path:
    path = SHARED_DATA / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present (CI lays ../shared beside the clone)")
    return path
