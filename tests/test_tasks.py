"""Task sources: lists, procedural seeds, JSONL with clear errors, and ``tasks=`` read alike by every family."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import claw_envs  # noqa: F401  (registers claw/*-v0)
from claw_envs.tasks import ProceduralTasks, Task, TaskList, TaskSourceError, content_hash, load_jsonl


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


# -- every family reads tasks= the same way ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent
MINIWOB = ROOT / "fixtures" / "gui" / "miniwob" / "html" / "miniwob"
SWE_ROWS = ROOT / "fixtures" / "swe" / "blinker.jsonl"


def _jsonl(folder: Path, name: str, *rows: dict) -> str:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


SOURCES = {  # family id -> (a source of its own, the task ids read from it, a value of the wrong kind)
    "claw/Conversation-v0": (
        lambda d: _jsonl(
            d, "gsm8k.jsonl", {"question": "Ann has 2 pens and buys 3. How many?", "answer": "2+3=5\n#### 5"}
        ),
        ["gsm8k-train-0"],
        "notes.txt",
    ),
    "claw/Echo-v0": (lambda d: _jsonl(d, "phrases.jsonl", {"phrase": "good morning"}), ["phrases-0"], "phrases.csv"),
    "claw/ToolCall-v0": (
        lambda d: _jsonl(d, "math.jsonl", {"id": "q7", "problem": "What is 6*7?", "answer": "42"}),
        ["q7"],
        "math.txt",
    ),
    "claw/Terminal-v0": (
        lambda d: _jsonl(
            d, "jobs.jsonl", {"id": "hello", "instruction": "Write hi to a.txt.", "check": "test -f a.txt"}
        ),
        ["hello"],
        "jobs.txt",
    ),
    "claw/SWE-v0": (lambda d: str(SWE_ROWS), ["pallets-eco__blinker-148"], "rows.txt"),
    "claw/GUI-v0": (lambda d: str(MINIWOB), None, "pages.jsonl"),
}


@pytest.mark.parametrize("env_id", sorted(SOURCES))
def test_every_family_takes_tasks_as_a_path_a_source_or_fails_at_construction(env_id, tmp_path):
    """``gym.make(id, tasks=...)``: the value ``--tasks`` passes, read by the family's loader when the env is made;
    a task source as it is; a missing path, a file of the wrong kind or a value of the wrong type is an error
    naming it right there, not at reset."""
    make, ids, wrong = SOURCES[env_id]
    env = gym.make(env_id, tasks=make(tmp_path)).unwrapped
    got = [t.id for t in env.tasks]
    expected = ids or sorted(f"miniwob.{p.stem}" for p in MINIWOB.glob("*.html"))
    assert got == expected and all(t.split == "train" for t in env.tasks), got
    same = gym.make(env_id, tasks=env.tasks).unwrapped
    assert same.tasks is env.tasks
    env.close()
    same.close()
    for missing in ("/nonexistent", tmp_path / "nothing-here"):
        with pytest.raises(TaskSourceError) as err:
            gym.make(env_id, tasks=missing)
        assert str(err.value).startswith(f"tasks={str(missing)!r}: ") and str(missing) in err.value.reason
    (tmp_path / wrong).write_text("not tasks\n")
    with pytest.raises(TaskSourceError, match=re.escape(f"tasks={str(tmp_path / wrong)!r}: ")):
        gym.make(env_id, tasks=str(tmp_path / wrong))
    with pytest.raises(TypeError, match="tasks= takes a path, a dataset name or a TaskSource, not int"):
        gym.make(env_id, tasks=42)


@pytest.mark.parametrize("env_id", ["claw/Echo-v0", "claw/ToolCall-v0", "claw/Conversation-v0"])
def test_a_task_file_given_as_tasks_resets_on_its_own_task(env_id, tmp_path):
    make, ids, _ = SOURCES[env_id]
    env = gym.make(env_id, tasks=make(tmp_path)).unwrapped
    _, info = env.reset(seed=0)
    assert info["task_id"] == ids[0]
    env.close()


def test_a_family_without_a_loader_refuses_text_sources():
    from claw_envs import ClawEnv

    class Bare(ClawEnv):
        @classmethod
        def default_tasks(cls, split="train"):
            return TaskList([Task("a", split)], split)

    assert [t.id for t in Bare().tasks] == ["a"]
    with pytest.raises(TaskSourceError, match="Bare reads no task files or datasets"):
        Bare(tasks="tasks.jsonl")
