"""Task sources: lists, procedural seeds, JSONL with clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from claw_envs.tasks import ProceduralTasks, Task, TaskList, content_hash, load_jsonl


def test_content_hash_is_canonical():
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert Task("x", "train", {"q": 1}).hash != Task("x", "train", {"q": 2}).hash


def test_task_list_rejects_duplicates_and_empty():
    with pytest.raises(ValueError):
        TaskList([])
    with pytest.raises(ValueError):
        TaskList([Task("a", "train"), Task("a", "train")])


def test_procedural_tasks_are_disjoint_by_seed_range():
    train = ProceduralTasks(lambda s: {"n": s}, range(0, 100), "train", "p")
    test = ProceduralTasks(lambda s: {"n": s}, range(100, 110), "test", "p")
    assert {t.id for t in train}.isdisjoint({t.id for t in test})
    assert test.get("p-105").data == {"n": 105}
    with pytest.raises(KeyError, match="range"):
        test.get("p-5")
    rng = np.random.default_rng(0)
    assert test.sample(rng).split == "test"
    assert train.describe() == "100 (procedural)"


def test_load_jsonl_maps_fields_and_reports_bad_lines(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"problem": "1+1", "answer": "2", "id": "q1"}\n\n{"problem": "2+2", "answer": "4", "id": "q2"}\n')
    tasks = load_jsonl(good, id_field="id", mapping={"problem": "question"})
    assert [t.id for t in tasks] == ["q1", "q2"]
    assert tasks.get("q2").data["question"] == "2+2"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_jsonl(bad)
