"""The LoRA warm start (``claw_train.models.warm_start``): its loss is the plain forward's, it trains, merges and caches
a folder that loads like any model, and ``--warm-start`` defaults to the family's steps for named models only. The warm
start of the real model itself runs in tests/test_named_models.py (SWE and GUI at a small budget)."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest
import torch

from claw_train.models import tiny
from claw_train.models.tiny_sft import sft_loss
from claw_train.models.warm_start import MARKER, _batch_backward, _source, warm_started
from claw_train.options.resolve import build
from claw_train.options.tree import ConfigError, EvalArgs, TrainArgs
from claw_train.policy.hf import load_causal_lm


@pytest.fixture(scope="module")
def base():
    return tiny.build_tiny()


@pytest.mark.parametrize("shared", [0, 40])
def test_the_batch_loss_is_the_plain_forward_loss(base, shared):
    model = load_causal_lm(str(base)).train()
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(10, 2000, (shared,), generator=gen).tolist()
    batch = []
    for prompt, completion in ((50, 7), (63, 12), (45, 3)):
        ids = prefix + torch.randint(10, 2000, (prompt + completion - shared,), generator=gen).tolist()
        batch.append((ids, prompt))
    with torch.no_grad():
        plain = sft_loss(model, batch, pad_id=0, shared=0).item()
    ours = _batch_backward(model, batch, shared)
    assert ours == pytest.approx(plain, rel=1e-4)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


def test_a_warm_start_trains_merges_and_is_cached(base, tmp_path, monkeypatch):
    monkeypatch.setenv("CLAW_MODEL_CACHE", str(tmp_path))
    said: list[str] = []
    folder = warm_started(base, "echo", steps=2, progress=False, say=said.append)
    assert folder.parent == tmp_path and folder.name.startswith(f"{base.name}-warm-echo-")
    report = json.loads((folder / "warm_start.json").read_text())
    assert report["rows"] == 8 and report["first_loss"] > 0  # 2 steps of 4 demonstrations
    assert json.loads((folder / MARKER).read_text())["settings"]["steps"] == 2
    warm = load_causal_lm(str(folder)).state_dict()
    plain = load_causal_lm(str(base)).state_dict()
    assert set(warm) == set(plain) and not any("lora" in name for name in warm)  # merged: a plain model folder
    assert any(not torch.equal(warm[name], plain[name]) for name in plain)
    assert warm_started(base, "echo", steps=2, progress=True, say=said.append) == folder
    assert said == []  # cached: built once, nothing said the second time (progress=False the first)
    with pytest.raises(ValueError, match="at least 1 step"):
        warm_started(base, "echo", steps=0)


def test_warm_start_defaults_to_the_familys_steps_for_named_models_only():
    assert build(TrainArgs, command="train", env="swe", model="smollm2").run.warm_start == 24
    assert build(EvalArgs, command="eval", env="gui", model="smollm2").run.warm_start == 24
    assert build(TrainArgs, command="train", env="conversation", model="smollm2").run.warm_start == 0
    assert build(TrainArgs, command="train", env="swe", model="tiny").run.warm_start == 0
    assert build(TrainArgs, command="train", env="swe", model="smollm2", warm_start=3).run.warm_start == 3
    with pytest.raises(ConfigError, match="--warm-start must be >= 0"):
        build(TrainArgs, command="train", env="swe", model="smollm2", warm_start=-1)


def test_the_warm_start_cache_follows_the_package_of_an_env_registered_as_a_class(tmp_path, monkeypatch):
    package = tmp_path / "warm_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from claw_envs.echo.env import EchoEnv\n\n\nclass PluginEcho(EchoEnv):\n    pass\n"
    )
    (package / "phrases.py").write_text("GREETING = 'hello'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from warm_plugin import PluginEcho

    gym.register("claw-test/WarmPlugin-v0", entry_point=PluginEcho)  # the class itself, not "module:Class"
    try:
        first = _source("claw-test/WarmPlugin-v0")
        assert _source("claw-test/WarmPlugin-v0") == first
        (package / "phrases.py").write_text("GREETING = 'hi there'\n")  # what makes its demonstrations changed
        assert _source("claw-test/WarmPlugin-v0") != first
    finally:
        del gym.registry["claw-test/WarmPlugin-v0"]
        sys.modules.pop("warm_plugin", None)
