"""SWE-bench instances: rows read from JSONL, JSON, parquet or a Hugging Face dataset id, and the built-in ones.

A row has SWE-bench's fields: ``instance_id``, ``repo`` (``owner/name``), ``base_commit``, ``problem_statement``,
``patch`` (the gold fix), ``test_patch``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists of test ids, or JSON strings
of lists as on the hub) — required — and ``hints_text``, ``version``, ``environment_setup_commit``, ``created_at``.
swebench 5.x rows add ``image``, ``eval_script``, ``log_parser`` and ``eval_type``; they are used when present.

claw's extension, two optional shell fields:

* ``install``: run once per cached environment (one per ``repo`` and ``environment_setup_commit``), on the host,
  in a checkout at ``environment_setup_commit`` with a fresh virtualenv active (``$VIRTUAL_ENV``); it installs
  the instance's dependencies from the package registries. The sandbox then runs with that virtualenv first on
  ``PATH``, and the files the install generated in the checkout (a version file, a compiled extension) are copied
  into every ``/testbed`` (:mod:`.generated`).
* ``test_cmd``: the test command, run in ``/testbed`` after the patch and ``test_patch`` are applied; its merged
  stdout+stderr is what is graded (e.g. ``python -m pytest -rA tests/test_x.py``).

The built-in instances (package data ``data/instances/{train,test}.jsonl``) are bugs in three small repos of ours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from claw_envs.tasks import Task, TaskList, json_object, load_hf

REQUIRED = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
TEXT_FIELDS = ("hints_text", "version", "environment_setup_commit", "install", "test_cmd", "image", "eval_script")
LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
SPLITS = ("train", "test")


def normalise(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row checked and made uniform (lists parsed from JSON strings); ``ValueError`` names what is wrong."""
    missing = [name for name in REQUIRED if row.get(name) in (None, "")]
    if missing:
        raise ValueError(f"missing the required field(s) {', '.join(missing)} (required: {', '.join(REQUIRED)})")
    data = dict(row)
    for name in LIST_FIELDS:
        value = data[name]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"{name} must be a list of test ids or a JSON string of one") from None
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise ValueError(f"{name} must be a list of test ids (strings)")
        data[name] = value
    if not data["FAIL_TO_PASS"]:
        raise ValueError("FAIL_TO_PASS is empty: nothing would tell a fix from no fix")
    for name in (*REQUIRED, *TEXT_FIELDS):
        if name in data and name not in LIST_FIELDS and data[name] is not None and not isinstance(data[name], str):
            raise ValueError(f"the field {name!r} must be a string")
    if str(data["repo"]).count("/") != 1:
        raise ValueError(f"repo must be 'owner/name', got {data['repo']!r}")
    data.setdefault("environment_setup_commit", data["base_commit"])
    data["environment_setup_commit"] = data["environment_setup_commit"] or data["base_commit"]
    return data


def builtin_instances(split: str = "train") -> TaskList:
    """The built-in instances of ``split`` (``train`` or ``test``)."""
    if split not in SPLITS:
        raise ValueError(f"the built-in SWE instances have splits 'train' and 'test', not {split!r}")
    text = (files("claw_envs.swe") / "data" / "instances" / f"{split}.jsonl").read_text(encoding="utf-8")
    rows = [json_object(line, f"built-in {split}:{i}") for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    return _tasks(rows, split, f"built-in {split} instances")


def load_instances(source: str | Path, *, split: str = "test") -> TaskList:
    """Instances from a ``.jsonl``, ``.json`` (a list of rows) or ``.parquet`` file, or a Hugging Face dataset id
    such as ``SWE-bench/SWE-bench_Verified`` (fetched only when asked; ``split`` is the dataset's split)."""
    path = Path(source)
    if path.exists():
        rows = _read_file(path)
        return _tasks(rows, split, str(path))
    if str(source).count("/") == 1 and not str(source).startswith((".", "/")):
        hub = load_hf(str(source), split=split, id_field="instance_id")
        return _tasks([dict(t.data) for t in hub], split, str(source))
    raise ValueError(f"{source}: no such file, and not a Hugging Face dataset id (owner/name)")


def _read_file(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pandas

        return [dict(r) for r in pandas.read_parquet(path).to_dict("records")]
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err.msg})") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path}: expected a JSON list of instance objects")
        return rows
    return [json_object(line, f"{path}:{i}") for i, line in enumerate(text.split("\n"), 1) if line.strip()]


def _tasks(rows: list[dict[str, Any]], split: str, where: str) -> TaskList:
    tasks = []
    seen: set[str] = set()
    for index, row in enumerate(rows, 1):
        label = row.get("instance_id") or f"row {index}"
        try:
            data = normalise(_plain(row))
        except ValueError as err:
            raise ValueError(f"{where}: instance {label!r} (row {index}): {err}") from None
        if data["instance_id"] in seen:
            raise ValueError(f"{where}: instance {label!r} appears twice")
        seen.add(data["instance_id"])
        tasks.append(Task(id=data["instance_id"], split=split, data=data))
    if not tasks:
        raise ValueError(f"{where}: no instances")
    return TaskList(tasks, split)


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """Parquet rows carry numpy arrays for lists: plain Python values instead."""
    return {k: (v.tolist() if hasattr(v, "tolist") and not isinstance(v, str) else v) for k, v in row.items()}
