"""Read a JSON-lines file a writer is still appending to: each call returns only the lines completed since the last.

A line is consumed once its ``\\n`` is on disk, so the half-written last line of a live run (or the torn one a
killed run leaves) is never parsed early; a complete line that is not JSON is counted and skipped. Nothing is
locked: the reader opens the file read-only, reads from where it stopped and closes it again.
"""

from __future__ import annotations

import itertools
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


class Chunk:
    """Complete lines read at once: ``data`` ends with a newline; ``base`` is its offset in the file and
    ``first_line`` the number of its first line."""

    def __init__(self, data: bytes, base: int, first_line: int):
        self.data, self.base, self.first_line = data, base, first_line
        self.lines = data.split(b"\n")[:-1]

    def offsets(self) -> list[int]:
        """Where each line starts in the file."""
        return list(itertools.accumulate((len(raw) + 1 for raw in self.lines[:-1]), initial=self.base))


@dataclass
class JsonlTail:
    """The read position in one JSONL file and what was wrong with it so far."""

    path: Path
    offset: int = 0
    lines: int = 0
    bad: list[int] = field(default_factory=list)  # line numbers of complete lines that are not JSON
    pending: int = 0  # bytes after the last newline: a line still being written (or torn by a kill)

    def read_chunk(self, limit: int = MAX_READ) -> Chunk | None:
        """The complete lines written since the last call (at most ``limit`` bytes' worth), or ``None``."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return None
        if size < self.offset:  # the file was replaced or cut: start over
            self.offset, self.lines, self.bad = 0, 0, []
        if size == self.offset:
            self.pending = 0
            return None
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(min(size - self.offset, limit))
        end = consumed = data.rfind(b"\n") + 1
        if end == 0:  # no complete line yet
            self.pending = len(data)
            if len(data) < limit:
                return None
            consumed = len(data)  # one line longer than a whole read: taken as a line of its own
            data += b"\n"
            end = len(data)
        chunk = Chunk(data[:end], self.offset, self.lines + 1)
        self.offset += consumed
        self.pending = max(0, size - self.offset)
        self.lines += len(chunk.lines)
        return chunk

    def read_new(self) -> Iterator[Line]:
        """The non-empty lines completed since the last call."""
        chunk = self.read_chunk()
        if chunk is None:
            return
        for k, (raw, offset) in enumerate(zip(chunk.lines, chunk.offsets(), strict=True)):
            if raw.strip():
                yield Line(chunk.first_line + k, offset, raw)

    def mark_bad(self, number: int) -> None:
        """Count line ``number`` as one that is not a JSON object (skipped)."""
        self.bad.append(number)

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
                self.mark_bad(line.number)


def read_line(path: Path, offset: int, length: int) -> dict[str, Any] | None:
    """The record whose bytes are at ``offset`` (``None`` when the file no longer holds it)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            record = json.loads(fh.read(length))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
