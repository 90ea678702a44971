"""Read a JSON-lines file a writer is still appending to: each call returns only the lines completed since the last.

A line is consumed once its ``\\n`` is on disk, so the half-written last line of a live run (or the torn one a
killed run leaves) is never parsed early; a complete line that is not JSON is counted and skipped. Nothing is
locked: the reader opens the file read-only, reads from where it stopped and closes it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_READ = 64 << 20
"""Bytes read from one file per refresh (a huge file is indexed over several refreshes, the page live meanwhile)."""


@dataclass
class Line:
    """One complete line: its number in the file, where its bytes are (to read it again later) and the bytes."""

    number: int
    offset: int
    raw: bytes


@dataclass
class JsonlTail:
    """The read position in one JSONL file and what was wrong with it so far."""

    path: Path
    offset: int = 0
    lines: int = 0
    bad: list[int] = field(default_factory=list)  # line numbers of complete lines that are not JSON
    pending: int = 0  # bytes after the last newline: a line still being written (or torn by a kill)

    def read_new(self, limit: int = MAX_READ) -> Iterator[Line]:
        """The non-empty lines completed since the last call (at most ``limit`` bytes' worth)."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return
        if size < self.offset:  # the file was replaced or cut: start over
            self.offset, self.lines, self.bad = 0, 0, []
        if size == self.offset:
            self.pending = 0
            return
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(min(size - self.offset, limit))
        end = chunk.rfind(b"\n") + 1
        if end == 0:  # no complete line yet
            self.pending = len(chunk)
            if len(chunk) < limit:
                return
            end = len(chunk)  # one line longer than a whole read: take it as a line of its own
        start, base = 0, self.offset
        self.offset += end
        self.pending = size - self.offset
        while start < end:
            stop = chunk.find(b"\n", start, end)
            stop = end if stop < 0 else stop
            raw = chunk[start:stop]
            self.lines += 1
            if raw.strip():
                yield Line(self.lines, base + start, raw)
            start = stop + 1

    def mark_bad(self, line: Line) -> None:
        """Count ``line`` as one that is not a JSON object (skipped)."""
        self.bad.append(line.number)

    def records(self) -> Iterator[dict[str, Any]]:
        """The new lines that are JSON objects (the others marked bad)."""
        for line in self.read_new():
            try:
                record = json.loads(line.raw)
            except ValueError:
                record = None
            if isinstance(record, dict):
                yield record
            else:
                self.mark_bad(line)


def read_line(path: Path, offset: int, length: int) -> dict[str, Any] | None:
    """The record whose bytes are at ``offset`` (``None`` when the file no longer holds it)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            record = json.loads(fh.read(length))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
