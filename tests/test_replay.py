"""--replay: which rows are rehearsed, the defaults per family and model, and bad input said before a model loads.

The loss itself is checked against a hand computation in tests/test_trainer_loss.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claw_train.options.families import spec_for
from claw_train.options.resolve import build
from claw_train.options.tree import ConfigError, TrainArgs
from claw_train.training.replay import read_rows, replay_rows

CLAW_TRAIN = str(Path(sys.executable).parent / "claw-train")
ROW = {"messages": [{"role": "user", "content": "What is 2 + 3?"}], "completion": "2 + 3 = 5"}


def test_defaults_replay_the_conversation_familys_demonstrations_on_tiny_models_only():
    assert build(TrainArgs, command="train", env="conversation").training.replay == 1.0
    assert build(TrainArgs, command="train", env="toolcall").training.replay == 0.0  # no family default
    hub = build(TrainArgs, command="train", env="conversation", model="Qwen/Qwen3-4B")
    assert hub.training.replay == 0.0  # a hub model was not bootstrapped on the family's demonstrations
    assert build(TrainArgs, command="train", env="conversation", replay=0.5).training.replay == 0.5
    assert build(TrainArgs, command="train", env="conversation", replay=0.0).training.replay == 0.0
    assert replay_rows(hub.training, spec_for("conversation"), "Qwen/Qwen3-4B") is None


def test_the_family_rows_leave_out_unhinted_demonstrations():
    training = build(TrainArgs, command="train", env="conversation").training
    rows = replay_rows(training, spec_for("conversation"), "tiny")
    assert rows and all(row["hinted"] for row in rows)  # the unprompted style is what training changes
    assert {row["persona"] for row in rows} == {"student", "teacher"}
    assert any("[" in row["messages"][-1]["content"] for row in rows)  # the hint rides on the user's message


def test_a_replay_file_is_read_as_is(tmp_path):
    path = tmp_path / "keep.jsonl"
    path.write_text(json.dumps(ROW) + "\n\n" + json.dumps({**ROW, "tools": []}) + "\n")
    training = build(TrainArgs, command="train", env="toolcall", replay=0.3, replay_data=path).training
    assert replay_rows(training, spec_for("toolcall"), "Qwen/Qwen3-4B") == [ROW, {**ROW, "tools": []}]
    given = build(TrainArgs, command="train", env="toolcall", model="Qwen/Qwen3-4B", replay_data=path).training
    assert given.replay == 1.0  # a file given is meant to be replayed


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no rows"),
        ('{"messages": [], "completion": "x"}\n{not json\n', "keep.jsonl:2: not JSON"),
        ('{"messages": [{"role": "user", "content": "hi"}]}\n', 'keep.jsonl:1: each line must be {"messages"'),
        ('{"messages": ["hi"], "completion": "x"}\n', "keep.jsonl:1: each line must be"),
        ('["messages", "completion"]\n', "keep.jsonl:1: each line must be"),
    ],
)
def test_a_malformed_replay_file_names_the_line(tmp_path, text, says):
    path = tmp_path / "keep.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"^--replay-data") as err:
        read_rows(path)
    assert says in str(err.value)


def test_replay_without_rows_says_what_to_give(tmp_path):
    with pytest.raises(ConfigError, match="needs --replay-data FILE for --model Qwen/X"):
        replay_rows(build(TrainArgs, command="train", env="echo", replay=1.0).training, spec_for("echo"), "Qwen/X")
    with pytest.raises(ConfigError, match="cannot read it"):
        read_rows(tmp_path / "missing.jsonl")
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot read it"):
        read_rows(tmp_path / "binary.jsonl")


def test_a_family_without_demonstrations_has_none_to_replay():
    training = build(TrainArgs, command="train", env="swe", replay=1.0).training
    with pytest.raises(ConfigError, match="the swe family has no demonstrations to replay; give --replay-data FILE"):
        replay_rows(training, spec_for("swe"), "tiny")
    echo = replay_rows(build(TrainArgs, command="train", env="echo", replay=1.0).training, spec_for("echo"), "tiny")
    assert echo and all("completion" in row for row in echo)  # demonstrations that mark no hint are all kept


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--replay", "-1"], "--replay must be >= 0, got -1.0"),
        (["--replay-data", "missing.jsonl"], "--replay-data missing.jsonl: cannot read it"),
        (["--model", "Qwen/Qwen3-4B"], "needs --replay-data FILE for --model Qwen/Qwen3-4B"),
    ],
)
def test_cli_refuses_bad_replay_options_before_any_model_loads(tmp_path, extra, says):
    args = [CLAW_TRAIN, "--env", "conversation", "--output-dir", str(tmp_path / "run"), "--replay", "1", *extra]
    proc = subprocess.run(
        args, capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert says in " ".join(proc.stdout.split()), proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr and not (tmp_path / "run").exists()
