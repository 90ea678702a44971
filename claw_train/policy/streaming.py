"""Token-by-token text for a backend whose worker thread samples the tokens (``inprocess``): the worker calls
``on_token`` with each sampled token, :class:`TextStream` turns the tokens into text pieces there (so the caller's
event loop only forwards them), and :func:`stream_tokens` yields the pieces on the caller's loop, then the finished
:class:`~claw_train.policy.base.Completion` — the same token-exact one a plain ``generate`` returns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from claw_train.policy.base import Completion

OnToken = Callable[[int], None]


class TextStream:
    """Sampled tokens to text pieces, incrementally: a piece is held back while it ends in an incomplete character
    (a byte-level token may hold part of one), and end-of-sequence tokens are not text (``Completion.text`` drops
    them too). Only the last few tokens are decoded per step."""

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int]):
        self.tokenizer = tokenizer
        self.eos = set(eos_ids)
        self.ids: list[int] = []
        self.prefix = 0  # ids[prefix:read] decode to text already sent (the context for the next piece)
        self.read = 0

    def push(self, token: int) -> str:
        """The new text ``token`` completes ("" while it is held back)."""
        if token in self.eos:
            return ""
        self.ids.append(token)
        sent, text = self._window()
        if len(text) <= len(sent) or text.endswith("\ufffd") or not text.startswith(sent):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(sent) :]

    def flush(self) -> str:
        """The text still held back at the end (an incomplete character reads U+FFFD, as in the whole decode)."""
        sent, text = self._window()
        self.prefix = self.read = len(self.ids)
        return text[len(sent) :] if text.startswith(sent) else ""

    def _window(self) -> tuple[str, str]:
        """The decoded context already sent, and the same context with the tokens held back since."""
        sent = self.tokenizer.decode(self.ids[self.prefix : self.read], skip_special_tokens=False)
        return sent, self.tokenizer.decode(self.ids[self.prefix :], skip_special_tokens=False)


async def stream_tokens(
    make: Callable[[OnToken], Any], submit: Callable[[Any], None], text: TextStream
) -> AsyncIterator[str | Completion]:
    """Yield the text of a generation as it is sampled, then its :class:`Completion`: ``make(on_token)`` builds the
    request, ``submit(request)`` hands it to the worker, which calls ``on_token`` with each token and resolves
    ``request.future`` (a :class:`concurrent.futures.Future`) with the completion."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()

    def on_token(token: int) -> None:  # the worker thread
        piece = text.push(token)
        if piece:
            loop.call_soon_threadsafe(pieces.put_nowait, piece)

    def finished(_: Any) -> None:  # the worker thread, after every on_token call: the end of the pieces
        with contextlib.suppress(RuntimeError):  # the caller's loop is gone
            loop.call_soon_threadsafe(pieces.put_nowait, None)

    request = make(on_token)
    future = request.future
    future.add_done_callback(finished)
    submit(request)
    sent = []
    while (piece := await pieces.get()) is not None:
        sent.append(piece)
        yield piece
    completion: Completion = future.result()
    emitted = "".join(sent)
    if len(completion.text) > len(emitted) and completion.text.startswith(emitted):
        yield completion.text[len(emitted) :]  # a character still incomplete when the stream ended
    yield completion
