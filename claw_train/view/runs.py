"""One run folder as the page sees it, read incrementally: :meth:`RunIndex.refresh` reads only what the run wrote
since the last call (new lines of ``logs/v*.jsonl``, ``evals.jsonl``, ``ledger.jsonl``; ``run.json`` and
``summary.json`` when they change) and indexes each turn once (:class:`~claw_train.view.table.TurnTable`).

It never writes, never locks a file and never needs a path the run recorded: everything is found under the folder
given, so a run copied from another machine (its ``run.json`` naming directories that do not exist here) reads the
same. Lines that are not JSON (a run killed mid-write) are counted per file and skipped.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from claw_train.view.table import SERVED_KINDS, TURN_LINE, TurnFilter, TurnLine, TurnTable
from claw_train.view.tail import JsonlTail, read_line

RUN_FILES = ("run.json", "summary.json", "ledger.jsonl", "evals.jsonl")
UPDATE_FIELDS = ("update", "time", "nan_skipped", "staleness", "update_seconds", "samples_per_s")
OTHER_KINDS = ("update", "metrics", "eval_episode", "event")
"""Log lines kept in full besides turns (small and few); the others (``eval``: evals.jsonl has them) are skipped."""
LIVE_SECONDS = 30.0
"""A run whose files changed this recently, with no summary written since, is shown as live."""


class NotARun(ValueError):
    """A folder the viewer cannot show: missing, not a folder, or holding none of a run's files."""


def check_run_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a run folder, or :class:`NotARun` saying what it is instead."""
    root = Path(path).expanduser()
    if not root.exists():
        raise NotARun(f"{root}: no such folder (give the --output-dir of a claw-train or claw-serve run)")
    if not root.is_dir():
        raise NotARun(f"{root}: not a folder (give the --output-dir of a claw-train or claw-serve run)")
    if not any((root / name).exists() for name in (*RUN_FILES, "logs")):
        raise NotARun(
            f"{root}: not a run folder (none of run.json, logs/, ledger.jsonl, evals.jsonl, summary.json in it)"
        )
    return root


class RunIndex:
    """The indexed contents of one run folder (see the module docstring); thread-safe."""

    def __init__(self, root: str | os.PathLike[str], label: str | None = None):
        self.root = check_run_dir(root)
        self.label = label or self.root.resolve().name
        self.lock = threading.Lock()
        self.turns = TurnTable()
        self.options: dict[str, Any] = {}
        self.summary: dict[str, Any] | None = None
        self.updates: dict[int, dict[str, Any]] = {}  # by update: its line and the trainer's figures for it
        self.evals: list[dict[str, Any]] = []
        self.eval_episodes: list[dict[str, Any]] = []
        self.ledger: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.generation = 0  # grows whenever refresh read something new
        self.last_write = 0.0  # the newest modification time among the run's files
        self._tails: dict[str, JsonlTail] = {}
        self._stamps: dict[str, float] = {}

    # -- reading ----------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read what the run wrote since the last call; returns whether anything was new."""
        changed = self._read_json("run.json") | self._read_json("summary.json")
        logs = self.root / "logs"
        names = sorted(p.name for p in logs.glob("v*.jsonl")) if logs.is_dir() else []
        for name in names:
            changed |= self._read_log(name)
        for name, target in (("evals.jsonl", self.evals), ("ledger.jsonl", self.ledger)):
            records = list(self._tail(self.root / name).records())
            with self.lock:
                target.extend(records)
            changed |= bool(records)
        stamps = [self._mtime(self.root / n) for n in RUN_FILES] + [self._mtime(logs / n) for n in names]
        self.last_write = max(stamps, default=0.0)
        if changed:
            with self.lock:
                self.generation += 1
        return changed

    def _read_log(self, name: str) -> bool:
        tail = self._tail(self.root / "logs" / name)
        chunk = tail.read_chunk()
        if chunk is None:
            return False
        try:  # every line at once; one that does not fit (not JSON, an odd field) sends the chunk line by line
            decoded: list[TurnLine | None] = TURN_LINE.decode_lines(chunk.data)
            if len(decoded) != len(chunk.lines):
                raise ValueError("blank lines")
        except (msgspec.DecodeError, ValueError):
            decoded = [_decode(raw) for raw in chunk.lines]
        offsets = chunk.offsets()
        turns, where, lengths, others = [], [], [], []
        for k, turn in enumerate(decoded):
            raw = chunk.lines[k]
            if turn is None:
                if raw.strip():
                    tail.mark_bad(chunk.first_line + k)
            elif turn.kind == "turn" or turn.kind in SERVED_KINDS:
                turns.append(turn)
                where.append(offsets[k])
                lengths.append(len(raw))
            elif turn.kind in OTHER_KINDS:
                others.append(json.loads(raw))
        file = self.turns.file_code(name)
        with self.lock:
            self.turns.add(turns, file, where, lengths)
            for record in others:
                self._add_other(record)
        return True

    def _add_other(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind in ("update", "metrics") and isinstance(record.get("update"), int):
            entry = self.updates.setdefault(record["update"], {"update": record["update"]})
            entry |= {k: record[k] for k in UPDATE_FIELDS if k in record}
            entry |= record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
        elif kind == "eval_episode":
            self.eval_episodes.append(record)
        elif kind == "event":
            self.events.append(record)

    def _tail(self, path: Path) -> JsonlTail:
        key = str(path)
        if key not in self._tails:
            self._tails[key] = JsonlTail(path)
        return self._tails[key]

    def _read_json(self, name: str) -> bool:
        path = self.root / name
        stamp = self._mtime(path)
        if stamp == self._stamps.get(name):
            return False
        self._stamps[name] = stamp
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False  # missing, or being written: read again when it changes
        if not isinstance(data, dict):
            return False
        with self.lock:
            if name == "run.json":
                self.options = data
            else:
                self.summary = data
        return True

    @staticmethod
    def _mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    # -- what the page asks ----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The run's identity, whether it is live, and its counts, all counted one way (see :meth:`counts`)."""
        with self.lock:
            opts, summary = self.options, self.summary
            problems = [
                f"{Path(t.path).name}: {len(t.bad)} line(s) not JSON (skipped): line {', '.join(map(str, t.bad[:5]))}"
                for t in self._tails.values()
                if t.bad
            ]
            torn = [Path(t.path).name for t in self._tails.values() if t.pending]
            state = {
                "label": self.label,
                "folder": str(self.root),
                "env": opts.get("env"),
                "method": opts.get("method"),
                "model": opts.get("model"),
                "target_updates": opts.get("updates"),
                "updates": max(self.updates, default=0),
                "generation": self.generation,
                "counts": self._counts(),
                "decisions": list(self.turns.reasons.names),
                "problems": problems,
                "incomplete_last_line": torn,
            }
        summary_time = self._stamps.get("summary.json", 0.0)
        ended = summary is not None and summary_time >= self.last_write - 1.0
        age = time.time() - self.last_write if self.last_write else None
        if ended:
            state["status"] = f"{summary.get('status')}: {summary.get('message')}"
        elif age is not None and age < LIVE_SECONDS:
            state["status"] = "live"
        elif self.last_write:
            state["status"] = f"no write for {age:.0f} s and no summary (stopped, or between slow steps)"
        else:
            state["status"] = "empty"
        state["live"] = not ended and age is not None and age < LIVE_SECONDS
        state["seconds_since_write"] = None if age is None else round(age, 1)
        return state

    def _counts(self) -> dict[str, int]:
        """Episodes, turns, judged turns, accepted samples and trained samples, from the logs and the ledger (the
        same definitions as the run's summary)."""
        t = self.turns
        trained = len({s for u in self.ledger if u.get("kind") == "update" for s in u.get("samples", [])})
        episodes = len([name for name in t.episodes.names if name])
        return {
            "episodes": episodes,
            "turns": t.n,
            "judged": t.judged,
            "accepted": len(t.sample_ids),
            "trained": trained,
        }

    def curves(self) -> dict[str, Any]:
        """Every curve the page draws, per policy version or update."""
        with self.lock:
            n = self.turns.n
            evals = [_eval_point(e) for e in self.evals]
            updates = [dict(self.updates[k]) for k in sorted(self.updates)]
            per_version = self.turns.by_version(n)
        return {"label": self.label, "evals": evals, "updates": updates, "per_version": per_version}

    def select(self, f: TurnFilter) -> list[int]:
        """Indices of the turns passing ``f``."""
        with self.lock:
            n = self.turns.n
        return self.turns.select(f, n).tolist()

    def row(self, i: int) -> dict[str, Any]:
        """The list row of turn ``i``: its columns and the start of its action and next state."""
        record = self.record(i) or {}
        ns = record.get("next_state") if isinstance(record.get("next_state"), dict) else {}
        judgement = record.get("judgement") if isinstance(record.get("judgement"), dict) else {}
        t = self.turns
        return {
            "n": i,
            "version": t.version.values[i],
            "task": t.tasks.names[t.task.values[i]],
            "step": t.step.values[i],
            "action": _short(record.get("action")),
            "next_state": _short(ns.get("text")),
            "score": judgement.get("score"),
            "hint": bool(t.hint.values[i]),
            "decision": self.decision(i),
            "credit": bool(t.credit.values[i]),
        }

    def decision(self, i: int) -> str:
        """``accepted``, ``penalised_<kind>`` (a degenerate turn), or the reason turn ``i`` was masked (or the kind of a
        served, never judged, request)."""
        return self.turns.reasons.names[self.turns.reason.values[i]]

    def record(self, i: int) -> dict[str, Any] | None:
        """The full logged record of turn ``i`` (read from its file)."""
        name, offset, length = self.turns.where(i)
        return read_line(self.root / "logs" / name, offset, length)

    def episode(self, i: int) -> list[int]:
        """The turns of turn ``i``'s episode, in step order (itself alone when it has no episode id)."""
        t = self.turns
        code = t.episode.values[i]
        if not t.episodes.names[code]:
            return [i]
        rows = self.turns.select(TurnFilter(episode=t.episodes.names[code])).tolist()
        return sorted(rows, key=lambda j: (t.step.values[j], j))


def _decode(raw: bytes) -> TurnLine | None:
    """One line's fields (``None``: not a JSON object); a field of an odd shape is read leniently."""
    try:
        return TURN_LINE.decode(raw)
    except msgspec.DecodeError:
        pass
    try:
        record = json.loads(raw)
        return msgspec.convert(record, TurnLine, strict=False) if isinstance(record, dict) else None
    except (ValueError, msgspec.ValidationError):
        return None


def _eval_point(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("update", "version", "score", "score_sd", "score_ci95", "success_rate")
    keep += ("valid_rate", "correct_rate", "accepted_rate")
    return {k: row[k] for k in keep if k in row} | {"score_name": row.get("score_name")}


def _short(text: Any, limit: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
