"""Run logs: per-policy-version JSONL written by a background thread, and the sample ledger.

* :class:`VersionedLog` — every turn with its judge votes, hint and accept/reject decision, plus
  updates, evaluations and events, as JSON lines in ``DIR/logs/v<version>.jsonl`` (one file per policy
  version, appended, never deleted). Callers only enqueue; a writer thread does the file work, so
  logging never sits on the serving path.
* :class:`Ledger` — ``DIR/ledger.jsonl``: one line per optimizer update with the ids of the samples it
  trained on (and those it dropped), plus a ``resume`` line whenever a run continues from a checkpoint.
  :meth:`Ledger.effective` replays it: entries after a checkpoint that a crash lost are superseded by
  the resumed run's, so the effective history has each update exactly once.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

_STOP = object()
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # str.splitlines breaks on these


def json_line(record: Any) -> str:
    """``record`` as one JSON line (with its ``\\n``), readable text kept but escaped wherever a reader could split it:
    ``json.dumps`` leaves U+0085, U+2028 and U+2029 raw, and ``str.splitlines`` breaks a line on them."""
    text = json.dumps(_jsonable(record), ensure_ascii=False)
    if any(ch in text for ch in _LINE_BREAKS):
        text = text.translate(str.maketrans(_LINE_BREAKS))
    return text + "\n"


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (none when it is missing). A line that does not parse, which is what a
    process killed mid-write leaves, is skipped with a warning naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                warnings.warn(f"{path}:{lineno}: skipped a line that is not JSON (a write cut off?)", stacklevel=2)
    return records


class Deferred:
    """A field worked out when the line is written — in :class:`VersionedLog`'s writer thread, off the serving path
    (decoding token ids, say). A failure is logged in its place as ``{"error": ...}``; it never stops the writer."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self.fn, self.args = fn, args

    def value(self) -> Any:
        """The field's value."""
        try:
            return self.fn(*self.args)
        except Exception as err:
            return {"error": f"{type(err).__name__}: {err}"}


def _jsonable(obj: Any) -> Any:
    """Make ``obj`` JSON-safe (dataclasses via ``to_dict``, :class:`Deferred` worked out; NaN/inf become strings)."""
    if isinstance(obj, Deferred):
        return _jsonable(obj.value())
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    if isinstance(obj, str | int | bool) or obj is None:
        return obj
    if isinstance(obj, float):
        return obj
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    return str(obj)


class VersionedLog:
    """Append JSON records to ``root/v<version>.jsonl`` from a background writer thread."""

    def __init__(self, root: str | os.PathLike[str], *, max_open: int = 8):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_open = max_open
        self._queue: queue.Queue[Any] = queue.Queue()
        self._files: OrderedDict[int, IO[str]] = OrderedDict()
        self.written = 0
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="claw-log-writer", daemon=True)
        self._thread.start()

    def path(self, version: int) -> Path:
        """The JSONL file of policy ``version``."""
        return self.root / f"v{version:05d}.jsonl"

    def write(self, version: int, record: dict[str, Any]) -> None:
        """Enqueue ``record`` for the file of policy ``version`` (returns at once)."""
        self._queue.put((int(version), {"time": round(time.time(), 3), **record}))

    def flush(self, timeout: float = 30.0) -> None:
        """Block until everything enqueued so far is on disk."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        """Write what is queued and stop the writer thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            if isinstance(item, threading.Event):
                for fh in self._files.values():
                    fh.flush()
                item.set()
                continue
            version, record = item
            try:
                fh = self._file(version)
                fh.write(json_line(record))
                self.written += 1
                if self._queue.empty():  # caught up: hand the records to the OS (a killed process keeps them)
                    for open_file in self._files.values():
                        open_file.flush()
            except OSError as err:  # a full disk must not stop training; the count says so
                self.errors.append(str(err))
        for fh in self._files.values():
            fh.close()
        self._files.clear()

    def _file(self, version: int) -> IO[str]:
        if version in self._files:
            self._files.move_to_end(version)
            return self._files[version]
        if len(self._files) >= self.max_open:
            _, old = self._files.popitem(last=False)
            old.close()
        fh = self.path(version).open("a", encoding="utf-8")
        _end_torn_line(fh)
        self._files[version] = fh
        return fh


def read_logs(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record under ``root`` (all versions, file order)."""
    return [record for path in sorted(Path(root).glob("v*.jsonl")) for record in read_jsonl(path)]


class Ledger:
    """Which samples each optimizer update trained on (see the module docstring). Thread-safe, fsynced."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def _append(self, record: dict[str, Any]) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            _end_torn_line(fh)
            fh.write(json_line(record))
            fh.flush()
            os.fsync(fh.fileno())

    def update(self, update: int, sample_ids: list[str], *, dropped: list[str], **extra: Any) -> None:
        """Record that optimizer update ``update`` (1-based) trained on ``sample_ids``."""
        self._append({"kind": "update", "update": update, "samples": sample_ids, "dropped": dropped, **extra})

    def resume(self, from_update: int, attempt: int) -> None:
        """Record that a run continues from the checkpoint taken after ``from_update`` updates."""
        self._append({"kind": "resume", "from_update": from_update, "attempt": attempt})

    def records(self) -> list[dict[str, Any]]:
        """Every line of the ledger as written (no replay; see :meth:`effective`)."""
        return read_jsonl(self.path)

    def attempts(self) -> int:
        """How many times the run has been resumed so far."""
        return sum(r["kind"] == "resume" for r in self.records())

    def effective(self) -> list[dict[str, Any]]:
        """Update entries that the current weights contain, in order (a resume drops lost later entries)."""
        kept: list[dict[str, Any]] = []
        for r in self.records():
            if r["kind"] == "resume":
                kept = [u for u in kept if u["update"] <= r["from_update"]]
            elif r["kind"] == "update":
                kept.append(r)
        return kept


def _end_torn_line(fh: IO[str]) -> None:
    """Before appending to a file a killed writer left without its final newline, end that torn line, so the
    next record starts a line of its own (readers skip the torn one)."""
    if fh.tell() == 0:
        return
    with open(fh.name, "rb") as raw:
        raw.seek(-1, os.SEEK_END)
        if raw.read(1) != b"\n":
            fh.write("\n")
