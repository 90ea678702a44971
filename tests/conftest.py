"""Shared test setup: offline, no hub, data from ../shared/data only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs workers side by side: one torch thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("CLAW_POLICY_THREADS", "1")

pytest_plugins = ["ci_skips"]  # ci_skips: under CI=true an unlisted skip fails the run

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def gsm8k_test_path() -> Path:
    path = SHARED_DATA / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present (CI lays ../shared beside the clone)")
    return path
