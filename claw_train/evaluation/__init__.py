"""Held-out evaluation, one module per env family; each exposes ``run(options) -> int`` for ``claw-eval``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class EvalOptions:
    """Everything ``claw-eval`` accepts; a family reads the fields that apply to it."""

    env: str
    model: str = "tiny"
    policy: str = "inprocess"
    persona: str = "student"
    dataset: str | None = None
    split: str = "test"
    n: int = 32
    k: int = 1
    seed: int = 0
    temperature: float = 1.0
    max_new_tokens: int = 512
    concurrency: int = 8
    responses: Path | None = None
    output_dir: Path | None = None
