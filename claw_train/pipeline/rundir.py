"""A run's directory: ``run.json`` (the options), the ledger, ``evals.jsonl``, ``summary.json``, checkpoints.

:meth:`RunDir.prepare` decides whether a run may start here: a fresh directory, or ``--resume`` from its last
complete checkpoint with the same identity (env, method, model, LoRA). A directory that already holds a run is
never overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claw_train.runlog.checkpoints import checkpoint_step, last_checkpoint, read_json
from claw_train.runlog.logs import Ledger, json_line, read_jsonl

IDENTITY = ("env", "method", "model", "lora")


class RunError(Exception):
    """A run that cannot start (bad output dir, nothing to resume, unknown env): said clearly."""


class RunDir:
    """The files of one run under ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.checkpoints = self.root / "checkpoints"
        self.ledger = Ledger(self.root / "ledger.jsonl")
        self.evals_path = self.root / "evals.jsonl"

    def prepare(self, options: Mapping[str, Any], *, resume: bool) -> Path | None:
        """Check the directory and record the run; returns the checkpoint to resume from (None: a fresh run, or a
        resumed run stopped before its first checkpoint, which starts again from the initial weights)."""
        self.root.mkdir(parents=True, exist_ok=True)
        last = last_checkpoint(self.checkpoints)
        if resume:
            saved = read_json(self.root / "run.json")
            if saved is None:
                raise RunError(f"--resume: no run in {self.root} to continue (no run.json, no checkpoint)")
            for key in IDENTITY:
                if key in saved and saved[key] != options.get(key):
                    raise RunError(
                        f"--resume: this run was started with {key}={saved[key]!r}, not {options.get(key)!r}"
                    )
            return last
        if last is not None or self.ledger.records():
            raise RunError(
                f"{self.root} already holds a run; pass --resume to continue it or choose another --output-dir"
            )
        plain = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}
        (self.root / "run.json").write_text(json.dumps(plain, indent=2, default=str))
        return None

    def evals_until(self, step: int) -> list[dict[str, Any]]:
        """The evaluations recorded at or before update ``step`` (a resumed run keeps those)."""
        return [e for e in read_jsonl(self.evals_path) if e["update"] <= step]

    def add_eval(self, row: Mapping[str, Any]) -> None:
        """Append ``row`` to ``evals.jsonl``."""
        with self.evals_path.open("a", encoding="utf-8") as fh:
            fh.write(json_line(row))

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json``."""
        (self.root / "summary.json").write_text(json.dumps(summary, indent=2, default=str))


__all__ = ["IDENTITY", "RunDir", "RunError", "checkpoint_step", "last_checkpoint"]
