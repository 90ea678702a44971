"""What a turn's log line carries beyond its text, decoded from its token ids in the log writer's thread
(:class:`~claw_train.runlog.logs.Deferred`): the prompt as the policy saw it, and the per-token credit of a trained
sample.

* ``prompt``: ``{"start": S, "tokens": N, "text": ...}`` — the prompt's tokens from ``S`` on (those the episode's
  turn before did not have: its reply and the env's answer), decoded with special tokens. A turn's whole prompt is
  its piece after the pieces of the turns before it (``claw_train.view.detail.prompt_text``), so an episode's logs
  hold each token once instead of growing with the square of its length.
* ``next_state.image``: a GUI turn's screenshot, written as ``logs/images/<episode>-<step>.png`` (the field holds
  that path, relative to ``logs/``).
* ``credit``: the reply's tokens as text ``pieces`` (one per token; a token that ends inside a character is ``""``
  and the next one carries it), the ``advantage`` trained on per token, and for OPD/Combined the ``teacher`` and
  behaviour (``old``) log-probs (teacher − old is the OPD part), with the ``score`` and the weights, rounded to
  :data:`DIGITS` decimals.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from claw_train.runlog.logs import Deferred
from claw_train.samples.records import TurnRecord

DIGITS = 4


def prompt_piece(tokenizer: Any, turn: TurnRecord) -> dict[str, Any]:
    """The ``prompt`` field of ``turn``'s log line (its text decoded when written)."""
    start = min(turn.prompt_start, len(turn.prompt_ids))
    text = Deferred(_decode, tokenizer, turn.prompt_ids[start:])
    return {"start": start, "tokens": len(turn.prompt_ids), "text": text}


def token_credit(
    tokenizer: Any,
    turn: TurnRecord,
    advantages: Sequence[float],
    *,
    method: str,
    score: float | None,
    teacher: Sequence[float] | None,
    w_rl: float,
    w_opd: float,
) -> dict[str, Any]:
    """The ``credit`` field of a trained sample's log line."""
    credit: dict[str, Any] = {
        "method": method,
        "pieces": Deferred(token_pieces, tokenizer, list(turn.completion_ids)),
        "advantage": _rounded(advantages),
        "score": score,
        "w_rl": w_rl,
        "w_opd": w_opd,
    }
    if teacher is not None:
        credit |= {"teacher": _rounded(teacher), "old": _rounded(turn.logprobs)}
    return credit


def screenshot(image_dir: Path, turn: TurnRecord, png: bytes) -> Deferred:
    """The ``next_state.image`` field of a GUI turn: the PNG written to ``image_dir`` when the line is written, the
    field its path relative to the logs folder."""
    name = f"{turn.episode_id}-{turn.step_index}.png"
    return Deferred(_write_png, image_dir, name, png)


def _write_png(image_dir: Path, name: str, png: bytes) -> str:
    image_dir.mkdir(parents=True, exist_ok=True)
    (image_dir / name).write_bytes(png)
    return f"{image_dir.name}/{name}"


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """One text piece per token id, decoded incrementally as a stream is (see the module docstring)."""
    from claw_train.policy.streaming import TextStream

    stream = TextStream(tokenizer, eos_ids=())
    pieces = [stream.push(token) for token in ids]
    if pieces:
        pieces[-1] += stream.flush()  # a reply cut off inside a character: its tail, as the whole decode shows it
    return pieces


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _rounded(values: Sequence[float]) -> list[float]:
    return [round(float(v), DIGITS) for v in values]
