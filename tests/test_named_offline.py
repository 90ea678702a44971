"""A named dataset the hub cannot give here fails at once — no hub call when offline is evident (an offline
variable set, or the hub's host not answering a first quick probe), one call when only a cached copy could answer —
naming the local file of the same rows that works and its field mapping; and that local form does work."""

from __future__ import annotations

import json
import socket
import sys
import types

import pytest

from claw_envs import hub
from claw_envs.conversation.tasks import load_gsm8k
from claw_envs.tasks import load_hf
from claw_envs.toolcall.tasks import NAMED, load_dataset


@pytest.fixture
def hub_calls(tmp_path, monkeypatch):
    """A stand-in ``datasets`` module counting ``load_dataset`` calls (each fails as a lost connection), and an
    empty Hugging Face cache."""
    made: list[tuple] = []

    def load(*args, **kwargs):
        made.append(args)
        raise ConnectionError("Couldn't reach it on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return made


@pytest.mark.parametrize("name", sorted(NAMED))
def test_offline_a_named_toolcall_dataset_fails_without_a_hub_call_naming_its_local_form(name, hub_calls, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub.HubUnreachable) as err:
        load_dataset(name)
    assert hub_calls == []  # nothing asked of the hub: no retries to wait for
    message = str(err.value)
    assert f"Couldn't reach {NAMED[name].hf_id!r} on the Hugging Face hub (HF_HUB_OFFLINE is set)" in message
    assert f"A local file of the same rows works in its place: --tasks {NAMED[name].local}" in message
    assert "#question=" in message and "answer=" in message


def test_a_hub_host_that_does_not_answer_the_probe_is_offline_too(hub_calls, monkeypatch):
    probes = []

    def refuse(address, timeout):
        probes.append((address, timeout))
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(hub.HubUnreachable, match=r"huggingface.co:443 did not answer within 1.5 s"):
        load_dataset("aime2024")
    assert probes == [(("huggingface.co", 443), hub.PROBE_SECONDS)] and hub_calls == []


def test_the_other_families_named_datasets_fail_the_same_way(hub_calls, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=r"A GSM8K-format JSONL file works in its place: --tasks gsm8k_test.jsonl"):
        load_gsm8k("openai/gsm8k")  # the conversation family's homework
    with pytest.raises(hub.HubUnreachable, match=r"rows works in its place: --tasks FILE"):
        load_hf("SWE-bench/SWE-bench_Lite", split="test", id_field="instance_id")  # any id read with load_hf
    assert hub_calls == []


def test_a_cached_copy_is_still_read_offline_with_one_call_and_no_retry(hub_calls, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "hf" / "datasets" / "HuggingFaceH4___aime_2024").mkdir(parents=True)
    with pytest.raises(hub.HubUnreachable, match=r"aime_2024\.jsonl#question=problem,answer=answer,id=id"):
        load_dataset("aime2024")
    assert hub_calls == [("HuggingFaceH4/aime_2024", None)]


def test_the_local_form_named_in_the_message_reads_the_hubs_own_rows(tmp_path):
    rows = [{"id": 60, "problem": "What is 2 + 2?", "answer": "4", "url": "u"}, {"id": 61, "problem": "3 * 5?"}]
    rows[1]["answer"] = "15"
    (tmp_path / "aime_2024.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = load_dataset(f"{tmp_path / 'aime_2024.jsonl'}#question=problem,answer=answer,id=id")
    assert [(t.id, t.data["question"], t.data["answer"]) for t in tasks] == [
        ("60", "What is 2 + 2?", "4"),
        ("61", "3 * 5?", "15"),
    ]
    dapo = {"prompt": [{"role": "user", "content": "Find x."}], "reward_model": {"ground_truth": "34"}}
    dapo["extra_info"] = {"index": "a1"}
    (tmp_path / "dapo.jsonl").write_text(json.dumps(dapo) + "\n")
    mapped = NAMED["dapo-math"].local.split(" ")[0].replace("dapo.jsonl", str(tmp_path / "dapo.jsonl"))
    [task] = load_dataset(mapped)
    assert (task.id, task.data["question"], task.data["answer"]) == ("a1", "Find x.", "34")
