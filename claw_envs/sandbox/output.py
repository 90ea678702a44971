"""Bounded capture of a command's output: keep the head and the tail, count what was dropped; and the same cut
for text already captured, before a model reads it (:func:`cap_text`)."""

from __future__ import annotations


class CappedOutput:
    """Collects a byte stream in at most ``limit`` bytes: the first half and the last half.

    Feeding gigabytes costs ``limit`` bytes of memory; ``text()`` marks the cut clearly.
    """

    def __init__(self, limit: int):
        if limit < 2:
            raise ValueError(f"output limit must be at least 2 bytes, got {limit}")
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        """Add ``data``: it fills the head first, then only its last bytes are kept in the tail."""
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data[-self.tail_limit :]
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped between the head and the tail."""
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        """The captured text (UTF-8, undecodable bytes replaced), with a marker where bytes were dropped."""
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... output truncated: {dropped} of {self.total} bytes dropped ...]\n"
        return self.head.decode("utf-8", errors="replace") + marker + self.tail.decode("utf-8", errors="replace")


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to about ``limit`` characters, keeping its head and tail; whether it was cut."""
    if len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[len(text) - tail :]}", True
