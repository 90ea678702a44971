"""The run's JSON-lines files survive what models write and what a kill leaves: every line splits as one line
for any reader, a torn last line is skipped (not fatal), and a half-saved checkpoint is not resumed from."""

from __future__ import annotations

import json

import pytest

from claw_train.pipeline.rundir import last_checkpoint
from claw_train.runlog.logs import Ledger, VersionedLog, json_line, read_jsonl, read_logs

# Unicode line boundaries json.dumps(ensure_ascii=False) leaves raw; str.splitlines() splits on each of them.
BREAKS = "a\x85b\u2028c\u2029d"


def test_a_json_line_is_one_line_for_every_reader_and_keeps_readable_text():
    record = {"action": BREAKS, "hint": "再试一次 — café", "n": 1}
    line = json_line(record)
    assert line.endswith("\n") and line.count("\n") == 1
    assert len(line.splitlines()) == 1  # the reader most scripts use
    assert json.loads(line) == record
    assert "再试一次 — café" in line  # not \\u-escaped: the logs stay readable


def test_versioned_log_lines_with_line_separators_read_back_whole(tmp_path):
    log = VersionedLog(tmp_path)
    log.write(0, {"kind": "turn", "action": BREAKS})
    log.write(0, {"kind": "turn", "action": "plain"})
    log.close()
    text = log.path(0).read_text(encoding="utf-8")
    assert [json.loads(line)["action"] for line in text.splitlines()] == [BREAKS, "plain"]
    assert [r["action"] for r in read_logs(tmp_path)] == [BREAKS, "plain"]


def test_a_torn_last_line_is_skipped_and_the_next_append_starts_a_new_line(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    torn = log_dir / "v00000.jsonl"
    torn.write_text(json_line({"kind": "turn", "step": 1}) + '{"kind": "turn", "st')  # killed mid-write
    log = VersionedLog(log_dir)
    log.write(0, {"kind": "turn", "step": 2})
    log.close()
    with pytest.warns(UserWarning, match=r"v00000.jsonl:2: skipped a line that is not JSON"):
        records = read_logs(log_dir)
    assert [r["step"] for r in records] == [1, 2]

    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.update(1, ["a"], dropped=[])
    with ledger.path.open("a") as fh:
        fh.write('{"kind": "update", "upd')  # killed mid-write
    ledger.resume(1, attempt=1)
    with pytest.warns(UserWarning, match="skipped a line"):
        kinds = [r["kind"] for r in ledger.records()]
    assert kinds == ["update", "resume"]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_a_checkpoint_whose_trainer_state_was_cut_off_is_not_resumed_from(tmp_path):
    for step, state in [(1, {"global_step": 1}), (2, None), (3, "")]:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / "trainer_state.json").write_text(state if isinstance(state, str) else json.dumps(state))
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4, "log_hi')  # killed mid-write
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-1"
