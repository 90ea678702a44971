"""Turns whose judge score is not trusted: cut off at the token limit, or repetitive.

An independent reproduction of the reference system collapsed when its judge rewarded repeated actions and batches
filled with short, looping replies. A degenerate turn's judge score is therefore never trusted; what becomes of it is
the run's ``--degenerate`` choice (:data:`HANDLING`). On ``make demo`` (docs/results.md), dropping them let the tiny
policy drift into ever longer replies until most were cut off, so by default they are penalised: scored -1, as an
unfinished reply deserves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from claw_train.samples.records import TurnRecord

Handling = Literal["penalise", "drop", "keep"]
HANDLING: tuple[Handling, ...] = ("penalise", "drop", "keep")
"""``penalise``: the judge's score replaced by :data:`PENALTY`, its hint kept (a judge that is down still masks the
turn); ``drop``: masked; ``keep``: judged like any turn. Each is counted, and its log line names its kind, whatever
the choice."""
PENALTY = -1.0
"""The score a penalised turn trains with, in place of the judge's."""
NGRAM = 4
"""Repetition is counted over token n-grams of this length."""
REPEATED_SHARE = 0.5
"""A completion with more than this share of its n-grams repeated (seen earlier in it) is repetitive."""
MIN_NGRAMS = 16
"""Completions with fewer n-grams than this are never called repetitive (too short to tell)."""


def repeated_share(ids: Sequence[int], n: int = NGRAM) -> float:
    """The share of ``ids``' n-grams that already occurred earlier in it (0.0 when it has none)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def degenerate(turn: TurnRecord) -> str | None:
    """``"cut_off"`` (the generation hit its token limit), ``"repetitive"`` (over :data:`REPEATED_SHARE` of its
    n-grams repeated), or ``None``."""
    if turn.finish_reason == "length":
        return "cut_off"
    ids = turn.completion_ids
    if len(ids) - NGRAM + 1 >= MIN_NGRAMS and repeated_share(ids) > REPEATED_SHARE:
        return "repetitive"
    return None
