"""Turns whose judge score is not trusted: cut off at the token limit, repetitive, or (general agents) an action
repeated after it failed in the same episode.

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


def mark_repeated_failures(episode: Sequence[TurnRecord]) -> None:
    """Tag each turn of ``episode`` whose action (whitespace aside) repeats one an earlier turn took and the
    environment scored below 0 (``info["repeats_failure"]``)."""
    failed: set[str] = set()
    for turn in episode:
        action = " ".join(turn.action_text.split())
        if action in failed:
            turn.info["repeats_failure"] = True
        if turn.next_state is not None and turn.next_state.evaluative.score < 0:
            failed.add(action)


def degenerate(turn: TurnRecord) -> str | None:
    """``"cut_off"`` (the generation hit its token limit), ``"repetitive"`` (over :data:`REPEATED_SHARE` of its
    n-grams repeated), ``"repeated_failure"`` (tagged by :func:`mark_repeated_failures`), or ``None``."""
    if turn.finish_reason == "length":
        return "cut_off"
    if turn.info.get("repeats_failure"):
        return "repeated_failure"
    ids = turn.completion_ids
    if len(ids) - NGRAM + 1 >= MIN_NGRAMS and repeated_share(ids) > REPEATED_SHARE:
        return "repetitive"
    return None
