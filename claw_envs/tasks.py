"""Tasks are data: built-in lists, procedural generators, JSONL files, directories, HF datasets.

Every task has an ``id``, a ``split`` tag and a content ``hash`` (SHA-256 of its canonical JSON),
so a run can say exactly which problems it saw.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def content_hash(data: Mapping[str, Any]) -> str:
    """SHA-256 of ``data`` as canonical JSON (sorted keys, no whitespace)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Task:
    """One problem: ``data`` holds whatever the family needs (question, answer, tests, …)."""

    id: str
    split: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        """The :func:`content_hash` of ``data``."""
        return content_hash(self.data)


class TaskSource:
    """A collection of tasks of one split. Subclasses: :class:`TaskList`, :class:`ProceduralTasks`."""

    split: str = "train"

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, task_id: str) -> Task:
        """The task with this id; ``KeyError`` with the id when there is none."""
        raise NotImplementedError

    def sample(self, rng: np.random.Generator) -> Task:
        """One task drawn with the env's own generator."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Task]:
        raise NotImplementedError

    def describe(self) -> str:
        """A short human description of the count (``claw-envs list``)."""
        return str(len(self))


class TaskList(TaskSource):
    """A finite list of tasks."""

    def __init__(self, tasks: Sequence[Task], split: str = "train"):
        if not tasks:
            raise ValueError(f"no tasks in split {split!r}")
        self.split = split
        self._tasks = list(tasks)
        self._by_id = {t.id: t for t in self._tasks}
        if len(self._by_id) != len(self._tasks):
            raise ValueError("task ids must be unique")

    def __len__(self) -> int:
        return len(self._tasks)

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"no task {task_id!r} in this {self.split} set of {len(self)} tasks") from None

    def sample(self, rng: np.random.Generator) -> Task:
        return self._tasks[int(rng.integers(len(self._tasks)))]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)


class ProceduralTasks(TaskSource):
    """Tasks made on demand from integer seeds: task ``f"{prefix}-{seed}"`` is ``make(seed)``.

    Disjoint splits come from disjoint seed ranges.
    """

    def __init__(self, make: Callable[[int], Mapping[str, Any]], seeds: range, split: str, prefix: str):
        self.make, self.seeds, self.split, self.prefix = make, seeds, split, prefix

    def __len__(self) -> int:
        return len(self.seeds)

    def _task(self, seed: int) -> Task:
        return Task(id=f"{self.prefix}-{seed}", split=self.split, data=dict(self.make(seed)))

    def get(self, task_id: str) -> Task:
        head, _, num = task_id.rpartition("-")
        if head != self.prefix or not num.isdigit() or int(num) not in self.seeds:
            raise KeyError(f"no task {task_id!r}: ids here are {self.prefix}-N for N in {self.seeds}")
        return self._task(int(num))

    def sample(self, rng: np.random.Generator) -> Task:
        return self._task(int(self.seeds[int(rng.integers(len(self.seeds)))]))

    def __iter__(self) -> Iterator[Task]:
        return (self._task(s) for s in self.seeds)

    def describe(self) -> str:
        return f"{len(self)} (procedural)"


TaskSourceLike = TaskSource | str | os.PathLike[str] | None
"""What ``tasks=`` takes: a :class:`TaskSource`, a path or dataset name for the family's loader, or ``None``."""


class TaskSourceError(ValueError):
    """A task source that cannot be read: ``source`` is what was given, ``reason`` says why."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"tasks={source!r}: {reason}")
        self.source, self.reason = source, reason


def load_source(load: Callable[..., TaskSource], source: str | os.PathLike[str], split: str) -> TaskSource:
    """``load(source, split=split)``, a family's loader; :class:`TaskSourceError` saying why when it cannot read
    ``source`` (no such file, a bad row, a hub dataset without network, a missing package) or finds no tasks."""
    text = os.fspath(source)
    try:
        tasks = load(text, split=split)
    except FileNotFoundError as err:
        raise TaskSourceError(text, f"no such file or folder: {err.filename or text}") from None
    except (OSError, ValueError, KeyError) as err:
        raise TaskSourceError(text, str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)) from None
    except Exception as err:  # a hub dataset without network, a missing optional package
        raise TaskSourceError(text, f"cannot load it: {type(err).__name__}: {err}") from None
    if len(tasks) == 0:
        raise TaskSourceError(text, f"no tasks in split {split!r}")
    return tasks


def json_object(line: str, where: str) -> dict[str, Any]:
    """One JSONL line as an object; ``ValueError`` naming ``where`` (``file:line``) otherwise."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object")
    return row


def load_jsonl(
    path: str | Path,
    *,
    split: str = "test",
    id_field: str | None = None,
    mapping: Mapping[str, str] | None = None,
    prefix: str | None = None,
) -> TaskList:
    """Tasks from a JSONL file, one object a line; ``mapping`` renames source fields to ours.

    Bad lines raise ``ValueError`` naming the file and line number.
    """
    path = Path(path)
    tasks = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json_object(line, f"{path}:{lineno}")
            tasks.append(_task_from_row(row, lineno - 1, split, id_field, mapping, prefix or path.stem))
    return TaskList(tasks, split=split)


def load_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    split: str,
    prefix: str,
    id_field: str | None = None,
    mapping: Mapping[str, str] | None = None,
) -> TaskList:
    """Tasks from in-memory rows (a list, a Hugging Face ``Dataset``, a parquet frame's records)."""
    return TaskList([_task_from_row(dict(r), i, split, id_field, mapping, prefix) for i, r in enumerate(rows)], split)


LOCAL_FORM = "A local .jsonl (one row a line) or .parquet file of the same rows works in its place: --tasks FILE."


def load_hf(
    dataset_id: str,
    *,
    split: str = "test",
    config: str | None = None,
    id_field: str | None = None,
    mapping: Mapping[str, str] | None = None,
    local_form: str = LOCAL_FORM,
) -> TaskList:
    """Tasks from a Hugging Face dataset id (imports ``datasets`` and reaches the hub only when called); when the hub
    is evidently out of reach, :class:`~claw_envs.hub.HubUnreachable` at once, naming ``local_form``."""
    from claw_envs.hub import load_hub_dataset

    ds = load_hub_dataset(dataset_id, config, split, local_form=local_form)
    return load_rows(ds, split=split, prefix=dataset_id.split("/")[-1], id_field=id_field, mapping=mapping)


def _task_from_row(
    row: dict[str, Any],
    index: int,
    split: str,
    id_field: str | None,
    mapping: Mapping[str, str] | None,
    prefix: str,
) -> Task:
    data = {ours: row[theirs] for theirs, ours in (mapping or {}).items() if theirs in row}
    data.update({k: v for k, v in row.items() if k not in (mapping or {})})
    task_id = str(row[id_field]) if id_field and id_field in row else f"{prefix}-{index}"
    return Task(id=task_id, split=split, data=data)
