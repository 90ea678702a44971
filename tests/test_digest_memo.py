"""Remembered data digests: a process that finds the tiny model cached does not regenerate its data, and a change
to the code that makes the data is noticed (regenerated once; the same data still finds the same model)."""

from __future__ import annotations

import json
from pathlib import Path

from claw_train.models import digest_memo, tiny
from claw_train.models.digest_memo import fingerprint, package_files, remembered


def test_a_digest_is_computed_once_and_an_unreadable_record_is_recomputed(tmp_path):
    calls = []

    def compute() -> str:
        calls.append(1)
        return f"digest-{len(calls)}"

    assert remembered(tmp_path, "abc", compute) == "digest-1"
    assert remembered(tmp_path, "abc", compute) == "digest-1" and len(calls) == 1
    assert remembered(tmp_path, "other", compute) == "digest-2"
    record = tmp_path / digest_memo.MEMO_DIR / "abc.json"
    record.write_text("{not json")
    assert remembered(tmp_path, "abc", compute) == "digest-3"
    assert json.loads(record.read_text()) == {"digest": "digest-3"}
    assert not list(record.parent.glob("*.tmp-*"))


def test_a_cache_that_cannot_be_written_still_answers(tmp_path):
    (tmp_path / digest_memo.MEMO_DIR).write_text("a file where the folder would go")
    assert remembered(tmp_path, "abc", lambda: "d") == "d"
    assert remembered(tmp_path, "abc", lambda: "e") == "e"  # not remembered, computed again


def test_a_fingerprint_follows_file_bytes_names_and_arguments(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    first = fingerprint([a, b], n=3)
    assert fingerprint([b, a, a], n=3) == first  # order and repeats do not matter
    assert fingerprint([a, b], n=4) != first
    assert fingerprint([a], n=3) != first
    a.write_text("x = 2\n")
    assert fingerprint([a, b], n=3) != first


def test_package_files_are_the_whole_package_without_compiled_caches():
    files = package_files("claw_envs.conversation.env")
    names = {f.relative_to(Path(tiny.__file__).parents[2] / "claw_envs").as_posix() for f in files}
    assert {"__init__.py", "conversation/env.py", "conversation/score.py"} <= names
    assert any(n.startswith("conversation/personas/") for n in names)  # data files count too
    assert not any("__pycache__" in n for n in names)
    assert package_files("no_such_package_here.mod") == []


def test_a_cached_bootstrap_is_found_without_regenerating_its_demonstrations(tmp_path, monkeypatch):
    made, trained = [], []
    real = tiny.demonstrations

    def counted(env_id, n, seed=0):
        made.append(n)
        return real(env_id, n, seed)

    def fake_build(out, *_args):
        (out / "config.json").write_text("{}")

    def fake_train(base, out, examples, *_args, **_kwargs):
        trained.append(len(examples))
        (out / "config.json").write_text("{}")

    marker = tmp_path / "maker.py"
    marker.write_text("# version 1\n")
    makers = tiny._maker_files
    cache = tmp_path / "cache"
    monkeypatch.setattr(tiny, "_build_base", fake_build)
    tiny.build_tiny(cache)  # the base first: its tokenizer corpus holds demonstrations of its own
    monkeypatch.setattr(tiny, "_train", fake_train)
    monkeypatch.setattr(tiny, "demonstrations", counted)
    monkeypatch.setattr(tiny, "_maker_files", lambda env_id: [*makers(env_id), marker])

    first = tiny.bootstrap("conversation", steps=2, cache_dir=cache, progress=False)
    assert made == [32] and trained == [32]  # generated once: for the digest and the build both
    assert tiny.bootstrap("conversation", steps=2, cache_dir=cache, progress=False) == first
    assert made == [32] and trained == [32]  # found: nothing regenerated, nothing trained

    marker.write_text("# version 2: the same demonstrations\n")
    assert tiny.bootstrap("conversation", steps=2, cache_dir=cache, progress=False) == first
    assert made == [32, 32] and trained == [32]  # regenerated once to check, the model still found

    monkeypatch.setattr(tiny, "demonstrations", lambda env_id, n, seed=0: [*counted(env_id, n, seed)][:-1])
    marker.write_text("# version 3: different demonstrations\n")
    other = tiny.bootstrap("conversation", steps=2, cache_dir=cache, progress=False)
    assert other != first and made == [32, 32, 32] and trained == [32, 31]
