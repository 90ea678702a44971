"""The turn index of a run: a few small columns per turn (version, step, judge score, decision, task, episode, hint,
where its line is) plus a lower-case search text, so that filtering 200,000 turns is a handful of numpy operations
and a page of rows is read back from the files it came from."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

NO_SCORE = 9
"""The score column's value for a turn no judge scored."""
SEARCH_CHARS = 400
"""Characters of a turn's action, next state and hint kept for text search."""
SERVED_KINDS = ("side", "one_off")
"""claw-serve's request kinds that are served and logged but never judged (they are turns too, never trained)."""


class Judged(msgspec.Struct):
    """The parts of a turn's judgement the index keeps."""

    score: Any = None
    available: Any = True
    hint: Any = None


class NextText(msgspec.Struct):
    """The part of a turn's next state the index keeps."""

    text: Any = None


class TurnLine(msgspec.Struct):
    """The fields of a log line the index keeps; the rest of the line is skipped unparsed (``credit`` and
    ``advantage`` only as whether they are there), so indexing costs a fraction of reading the lines as JSON."""

    kind: Any = None
    episode: Any = None
    task: Any = None
    session: Any = None
    step: Any = None
    version: Any = None
    action: Any = None
    next_state: NextText | None = None
    decision: Any = None
    reason: Any = None
    degenerate: Any = None
    penalised: Any = None
    sample_id: Any = None
    judgement: Judged | None = None
    hint_accepted: Any = None
    credit: msgspec.Raw = msgspec.Raw()
    advantage: msgspec.Raw = msgspec.Raw()


TURN_LINE = msgspec.json.Decoder(TurnLine)


class Codes:
    """Strings as small integers (tasks, episodes, reasons), both ways."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, name: str) -> int:
        """The code of ``name`` (a new one the first time)."""
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.names)
            self.names.append(name)
        return found

    def codes(self, names: list[str]) -> list[int]:
        """The codes of ``names``, in order."""
        ids = self.ids
        out = []
        for name in names:
            found = ids.get(name)
            if found is None:
                found = ids[name] = len(self.names)
                self.names.append(name)
            out.append(found)
        return out

    def matching(self, text: str) -> list[int]:
        """Codes of the names containing ``text`` (case-insensitive)."""
        needle = text.lower()
        return [i for i, name in enumerate(self.names) if needle in name.lower()]


class Column:
    """An append-only column: ``values`` (a Python list, appended to) read as a numpy array (only the new tail is
    converted)."""

    def __init__(self, dtype: Any):
        self.dtype = dtype
        self.values: list[Any] = []
        self._array = np.zeros(0, dtype=dtype)

    def array(self, n: int) -> np.ndarray:
        """The first ``n`` values as an array."""
        if len(self._array) < n:
            tail = np.asarray(self.values[len(self._array) : n], dtype=self.dtype)
            self._array = np.concatenate([self._array, tail])
        return self._array[:n]


@dataclass(frozen=True)
class TurnFilter:
    """What the turn list shows: every field is optional and they combine with AND."""

    version: str = ""  # "3" or "2-5"
    task: str = ""  # part of a task (or session) id
    score: str = ""  # "1", "0", "-1" or "none"
    reason: str = ""  # "accepted", "penalised_<kind>" or a masked reason
    hint: str = ""  # "yes" or "no"
    episode: str = ""  # an episode id, exactly
    q: str = ""  # text in the action, next state or hint

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TurnFilter:
        """A filter from query parameters (unknown ones ignored, values stripped)."""
        names = cls.__dataclass_fields__
        return cls(**{k: str(v).strip() for k, v in params.items() if k in names})


class TurnTable:
    """The columns of every turn of one run, in the order they were read."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.tasks, self.episodes, self.reasons = Codes(), Codes(), Codes()
        self.file = Column(np.int32)
        self.offset = Column(np.int64)
        self.length = Column(np.int32)
        self.version = Column(np.int32)
        self.step = Column(np.int32)
        self.score = Column(np.int8)
        self.reason = Column(np.int32)
        self.task = Column(np.int32)
        self.episode = Column(np.int32)
        self.hint = Column(np.bool_)
        self.credit = Column(np.bool_)
        self.search: list[str] = []
        self.sample_ids: set[str] = set()
        self.judged = 0
        self.n = 0

    def file_code(self, name: str) -> int:
        """The code of a log file's name."""
        if name not in self.files:
            self.files.append(name)
        return self.files.index(name)

    def add(self, turns: list[TurnLine], file: int, offsets: list[int], lengths: list[int]) -> None:
        """Index turns (log lines of ``kind`` turn, side or one_off) read from one file, column by column."""
        count = len(turns)
        self.file.values.extend([file] * count)
        self.offset.values.extend(offsets)
        self.length.values.extend(lengths)
        self.version.values.extend([_int(t.version) for t in turns])
        self.step.values.extend([_int(t.step) for t in turns])
        self.score.values.extend([_score(t.judgement) for t in turns])
        self.judged += sum(t.judgement is not None for t in turns)
        self.reason.values.extend(self.reasons.codes([_decision(t) for t in turns]))
        tasks = [str(t.task or t.session or "") for t in turns]
        self.task.values.extend(self.tasks.codes(tasks))
        self.episode.values.extend(self.episodes.codes([str(t.episode or "") for t in turns]))
        self.hint.values.extend([bool(t.hint_accepted) for t in turns])
        self.credit.values.extend([bool(t.credit) or bool(t.advantage) for t in turns])
        self.search.extend(
            [
                f"{t.action or ''}\n{t.next_state.text if t.next_state else ''}\n"
                f"{t.judgement.hint if t.judgement else ''}\n{task}"[:SEARCH_CHARS].lower()
                for t, task in zip(turns, tasks, strict=True)
            ]
        )
        self.sample_ids.update(str(t.sample_id) for t in turns if t.sample_id)
        self.n += count

    def select(self, f: TurnFilter, n: int | None = None) -> np.ndarray:
        """Indices of the turns (of the first ``n``) that pass ``f``, in order; raises ``ValueError`` for a
        malformed value (said to the page as is)."""
        n = self.n if n is None else n
        keep = np.ones(n, dtype=bool)
        if f.version:
            low, _, high = f.version.partition("-")
            try:
                lo, hi = int(low), int(high or low)
            except ValueError:
                raise ValueError(f"version must be a number or a range such as 2-5, not {f.version!r}") from None
            versions = self.version.array(n)
            keep &= (versions >= lo) & (versions <= hi)
        if f.score:
            scores = {"1": 1, "+1": 1, "0": 0, "-1": -1, "none": NO_SCORE}
            if f.score not in scores:
                raise ValueError(f"score must be 1, 0, -1 or none, not {f.score!r}")
            keep &= self.score.array(n) == scores[f.score]
        if f.reason:
            keep &= self.reason.array(n) == self.reasons.ids.get(f.reason, -1)
        if f.hint:
            keep &= self.hint.array(n) == (f.hint == "yes")
        if f.task:
            keep &= np.isin(self.task.array(n), self.tasks.matching(f.task))
        if f.episode:
            keep &= self.episode.array(n) == self.episodes.ids.get(f.episode, -1)
        rows = np.flatnonzero(keep)
        if f.q:
            needle = f.q.lower()
            search = self.search
            rows = np.asarray([i for i in rows.tolist() if needle in search[i]], dtype=np.int64)
        return rows

    def where(self, i: int) -> tuple[str, int, int]:
        """The log file, byte offset and length of turn ``i``."""
        return self.files[self.file.values[i]], self.offset.values[i], self.length.values[i]

    def by_version(self, n: int | None = None) -> dict[str, Any]:
        """Per policy version: turns, the judge's +1/0/-1 rates among scored turns, and each decision's share."""
        n = self.n if n is None else n
        versions, scores, reasons = self.version.array(n), self.score.array(n), self.reason.array(n)
        if n == 0:
            return {"versions": [], "turns": [], "judge": {}, "decisions": {}}
        present = np.unique(versions)
        pos = np.searchsorted(present, versions)
        turns = np.bincount(pos, minlength=len(present))
        scored = np.bincount(pos, weights=scores != NO_SCORE, minlength=len(present))
        judge = {}
        for label, value in (("+1", 1), ("0", 0), ("-1", -1)):
            hits = np.bincount(pos, weights=scores == value, minlength=len(present))
            judge[label] = _rates(hits, scored)
        decisions = {}
        for code, name in enumerate(self.reasons.names):
            hits = np.bincount(pos, weights=reasons == code, minlength=len(present))
            if hits.any():
                decisions[name] = _rates(hits, turns)
        return {"versions": present.tolist(), "turns": turns.tolist(), "judge": judge, "decisions": decisions}


def _decision(t: TurnLine) -> str:
    """``accepted``, ``penalised_<kind>`` (a degenerate turn trained with a penalty), or why it was masked."""
    if t.decision == "accepted":
        return f"penalised_{t.degenerate}" if t.penalised else "accepted"
    return str(t.reason or t.kind)


def _rates(hits: np.ndarray, totals: np.ndarray) -> list[float | None]:
    return [round(float(h / t), 4) if t else None for h, t in zip(hits, totals, strict=True)]


def _score(judgement: Judged | None) -> int:
    """A judged turn's score as -1, 0 or 1 (:data:`NO_SCORE` when no judge scored it)."""
    if judgement is None or judgement.available is False:
        return NO_SCORE
    value = judgement.score
    if isinstance(value, int | float) and math.isfinite(value):
        return (value > 0) - (value < 0)
    return NO_SCORE


def _int(value: Any) -> int:
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1
