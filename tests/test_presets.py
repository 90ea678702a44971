"""Model presets: which one a model gets, and the options a run resolves from it (what run.json records)."""

from __future__ import annotations

import json

import pytest

from claw_train.models.presets import PRESETS, parameters, preset_for
from claw_train.options.argv import parse
from claw_train.options.resolve import build, resolve, spec_for
from claw_train.options.tree import EvalArgs, TrainArgs


def test_each_model_class_gets_its_preset_without_loading_it(tmp_path):
    assert preset_for("tiny") == "tiny" and preset_for("smollm2") == "small"  # by name, before any fetch
    assert preset_for("no-such-org/no-such-model") == "qwen3-4b"  # unknown size: the paper's
    smol = {"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152}
    assert 120e6 < parameters(smol) < 150e6  # SmolLM2-135M
    qwen4b = {"hidden_size": 2560, "num_hidden_layers": 36, "intermediate_size": 9728, "vocab_size": 151936}
    assert 3.5e9 < parameters(qwen4b) < 4.5e9
    for name, config, expected in (("smol", smol, "small"), ("big", qwen4b, "qwen3-4b"), ("bad", "[1]", "qwen3-4b")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        assert preset_for(folder) == expected


def test_a_lora_checkpoint_or_run_folder_gets_its_base_models_preset(tmp_path):
    tiny_base = tmp_path / "tiny-base"
    tiny_base.mkdir()
    (tiny_base / "config.json").write_text(json.dumps({"hidden_size": 128, "num_hidden_layers": 2}))
    for base, expected in ((tiny_base, "tiny"), (tmp_path / "gone" / "smollm2-b179c9523d0e", "small")):
        run = tmp_path / f"run-{expected}"
        checkpoint = run / "checkpoints" / "checkpoint-2"
        checkpoint.mkdir(parents=True)
        (run / "run.json").write_text("{}")
        (checkpoint / "trainer_state.json").write_text('{"global_step": 2}')
        (checkpoint / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
        assert preset_for(checkpoint) == expected and preset_for(run) == expected  # gone: re-fetched by name


def test_a_run_resolves_and_records_the_presets_values():
    smol = build(TrainArgs, command="train", env="echo", model="smollm2")
    small = PRESETS["small"]
    assert (smol.training.lr, smol.training.lora) == (small.optimizer["learning_rate"], True)
    assert (smol.rollout.temperature, smol.evaluation.eval_temperature) == (0.6, 0.0)  # greedy pass@1
    tiny = build(TrainArgs, command="train", env="echo", model="tiny")
    assert (tiny.training.lr, tiny.training.lora, tiny.rollout.temperature) == (6e-4, False, 1.0)
    assert tiny.evaluation.eval_temperature == 1.0  # tiny's tables were measured sampling at 1.0
    given = build(TrainArgs, command="train", env="echo", model="smollm2", lora=False, lr=1e-4, temperature=0.9)
    assert (given.training.lr, given.training.lora, given.rollout.temperature) == (1e-4, False, 0.9)
    assert given.evaluation.eval_temperature == 0.0
    assert build(TrainArgs, command="train", env="echo", model="smollm2", eval_k=4).evaluation.eval_temperature == 0.6
    remote = build(TrainArgs, command="train", env="echo", model="smollm2", policy="sglang://127.0.0.1:1")
    assert remote.rollout.temperature == 1.0  # SGLang scores prompts at temperature 1 only
    ev = build(EvalArgs, command="eval", env="echo", model="smollm2")
    assert ev.evaluation.eval_temperature == 0.0
    given_eval = build(EvalArgs, command="eval", env="echo", model="smollm2", temperature=0.7)
    assert given_eval.evaluation.eval_temperature == 0.7  # claw-eval's --temperature, when given


def test_lora_is_a_flag_whose_absence_leaves_it_to_the_preset():
    spec = spec_for("echo")
    for argv, expected in (([], True), (["--lora"], True), (["--no-lora"], False)):
        args = parse(TrainArgs, ["--env", "echo", "--model", "smollm2", *argv])
        assert resolve(args, spec, command="train").training.lora is expected
    assert resolve(parse(TrainArgs, ["--env", "echo"]), spec, command="train").training.lora is False
    with pytest.raises(SystemExit):
        parse(TrainArgs, ["--env", "echo", "--lora", "yes"])
