"""The offline tiny model: build, load by path, cache, tokenizer round trips, chat template, bootstrap."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest
from test_cache import nothing_built

from claw_train.models import digest_memo, tiny, tiny_sft


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return tiny.build_tiny()


def test_build_loads_by_path_like_a_hub_model(tiny_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tok = AutoTokenizer.from_pretrained(tiny_path)
    assert AutoConfig.from_pretrained(tiny_path).model_type == "qwen3"
    n_params = sum(p.numel() for p in model.parameters())
    assert 100_000 < n_params <= 3_000_000
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert model.config.vocab_size == len(tok)
    for special in (*tiny.SPECIAL_TOKENS, *tiny.MARKUP_TOKENS):
        assert len(tok.encode(special, add_special_tokens=False)) == 1, special


def test_cache_hit_reuses_the_directory_without_building(tiny_path, monkeypatch):
    def must_not_build(*_args, **_kwargs):
        raise AssertionError("a cache hit must not rebuild")

    monkeypatch.setattr(tiny, "_build_base", must_not_build)
    assert tiny.build_tiny() == tiny_path
    assert (tiny_path / tiny.MARKER).exists()


def test_cache_key_follows_inputs_and_a_lock_serialises_builders(tmp_path, monkeypatch):
    calls = []

    def fake_build(out, corpus, template, spec):
        calls.append(spec)
        threading.Event().wait(0.3)  # long enough for a second builder to arrive while this one holds the lock
        (out / "config.json").write_text(json.dumps({"hidden": spec.hidden_size}))

    monkeypatch.setattr(tiny, "_build_base", fake_build)
    small = tiny.TinySpec(hidden_size=64)
    results = []
    threads = [threading.Thread(target=lambda: results.append(tiny.build_tiny(tmp_path, spec=small))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results[0] == results[1]
    other = tiny.build_tiny(tmp_path, spec=tiny.TinySpec(hidden_size=96))
    assert other != results[0] and len(calls) == 2
    assert tiny.build_tiny(tmp_path, spec=small) == results[0] and len(calls) == 2
    assert not list(tmp_path.glob("*.tmp-*")), "temporary build directories must be cleaned up"


def test_failed_build_leaves_no_cache_entry(tmp_path, monkeypatch):
    def broken(out, *_args):
        (out / "half.txt").write_text("partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(tiny, "_build_base", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        tiny.build_tiny(tmp_path)
    assert nothing_built(tmp_path, besides=(digest_memo.MEMO_DIR,))


def test_tokenizer_round_trips_any_text(tiny_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    rng = random.Random(7)
    samples = [
        "plain words, digits 0123456789 and punctuation!?",
        "e\u0301 vs \u00e9 (no normalisation), tabs\tand\r\nCRLF, nul \x00 and \x7f",
        "中文 日本語 한국어 العربية עברית 😀🎉👩‍👩‍👧 \U0001f9ea",
        "  leading and trailing spaces  ",
        '<tool_call>{"name": "python"}</tool_call> <|im_end|> literal specials',
    ]
    for _ in range(200):
        samples.append(
            "".join(chr(rng.choice([rng.randrange(0, 0xD800), rng.randrange(0xE000, 0x110000)])) for _ in range(12))
        )
    for s in samples:
        ids = tok.encode(s, add_special_tokens=False)
        assert tok.decode(ids, skip_special_tokens=False) == s, repr(s)
    assert tok.unk_token is None  # every byte has a token: nothing is ever unknown


def test_chat_template_renders_tool_calls_and_responses(tiny_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 6*7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "python", "arguments": {"code": "print(6*7)"}}}],
        },
        {"role": "tool", "content": "42"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "python"' in text.split("\n</tools>")[0]
    assert '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text, add_special_tokens=False)
    assert ids.count(tok.convert_tokens_to_ids("<tool_call>")) == text.count("<tool_call>") == 3  # 2 in the system text
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_bootstrap_trains_on_a_family_and_is_cached(tiny_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    path = tiny.bootstrap("echo", steps=12, progress=False)
    report = json.loads((path / "bootstrap.json").read_text())
    assert report["env_id"] == "claw/Echo-v0" and report["settings"]["steps"] == 12
    base = AutoModelForCausalLM.from_pretrained(tiny_path).state_dict()
    trained = AutoModelForCausalLM.from_pretrained(path).state_dict()
    assert any(not base[k].equal(trained[k]) for k in base)
    monkeypatch.setattr(tiny, "_train", lambda *a, **k: pytest.fail("a cached bootstrap must not retrain"))
    assert tiny.bootstrap("claw/Echo-v0", steps=12, progress=False) == path


def test_the_bootstrap_uses_the_idle_cores_and_says_how_many(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(tiny.os, "getloadavg", lambda: (0.4, 0.0, 0.0))
    assert tiny.idle_cores() == min(cores, 4)  # a quiet machine: every core (a 2-core laptop bootstraps 1.7x faster)
    monkeypatch.setattr(tiny.os, "getloadavg", lambda: (cores + 0.5, 0.0, 0.0))
    assert tiny.idle_cores() == 1  # a busy one: extra threads would only wait on each other
    monkeypatch.setattr(tiny.os, "getloadavg", lambda: (cores - 1.0, 0.0, 0.0))
    path = tiny.bootstrap("echo", steps=3, progress=False, cache_dir=None, settings=tiny.BootstrapSettings(seed=7))
    assert json.loads((path / "bootstrap.json").read_text())["threads"] == 1


def test_bootstrap_bad_inputs_are_clear():
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        tiny.bootstrap("nope", steps=1, progress=False)
    with pytest.raises(ValueError, match="steps must be >= 0"):
        tiny.bootstrap("echo", steps=-1, progress=False)


class _Hinted:
    """The same policy with a hint appended to the last user message as a bracketed note (the OPD teacher's view)."""

    def __init__(self, inner, hints):
        self.inner, self.hints, self.calls = inner, hints, 0

    async def generate(self, prompt, sampling, **kwargs):
        from claw_envs.messages import hinted_messages

        self.calls += 1
        return await self.inner.generate(hinted_messages(prompt, self.hints[self.calls % len(self.hints)]), sampling)


@pytest.mark.slow
@pytest.mark.timeout(900)  # it builds, or waits under the cache lock for, the 1,500-step bootstrap (as the demo test)
async def test_conversation_bootstrap_starts_in_assistant_style_and_follows_hints():
    """The real bootstrap, the one `make demo` trains (the family's bootstrap steps, cached): held-out problems,
    first replies, the student persona's rubric. Un-hinted the model writes mostly like an assistant;
    with a bracketed hint note it switches to the persona's style."""
    import claw_envs
    from claw_train.evaluation import evaluate
    from claw_train.policy import SamplingParams
    from claw_train.policy.inprocess import InProcessPolicy

    spec = claw_envs.family_spec("conversation")
    tasks = claw_envs.env_class(spec.env_id).default_tasks("test")

    async def personalization_eval(policy):
        return await evaluate(policy, spec, tasks, n=100, k=1, seed=0, sampling=sampling)

    path = tiny.bootstrap("conversation", steps=spec.training.bootstrap_steps, progress=False)
    rows = tiny.demonstrations("claw/Conversation-v0", 600, seed=99)
    assert {r["persona"] for r in rows} == {"student", "teacher"}  # the model learns to follow either one's hints
    hints = sorted({r["hint"] for r in rows if r["hinted"] and r["persona"] == "student"})
    policy = InProcessPolicy(path)
    try:
        sampling = SamplingParams(max_new_tokens=128, temperature=1.0)
        plain = await personalization_eval(policy)
        hinted = await personalization_eval(_Hinted(policy, hints))
    finally:
        policy.close()
    assert plain.summary["valid_rate"] >= 0.9 and hinted.summary["valid_rate"] >= 0.9
    assert plain.summary["score"] <= 0.3, plain.summary
    assert hinted.summary["score"] >= 0.8, hinted.summary
    persona_style = [r for r in plain.records if r["score"] == 1.0]
    assert persona_style, "un-hinted replies need some persona-style variety for RL to find"


def test_the_shared_prefix_pass_gives_the_plain_loss_and_gradients(tiny_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    rows = [tiny_sft.encode_example(tokenizer, ex, 768) for ex in tiny.demonstrations("claw/ToolCall-v0", 6)]
    shared = tiny_sft.shared_prefix(rows)
    assert shared > 200  # the tool-call system prompt and schema
    assert all(seq[:shared] == rows[0][0][:shared] and shared < prompt_len for seq, prompt_len in rows)

    def loss_and_grads(prefix: int) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        loss = tiny_sft.sft_loss(model, rows, tokenizer.pad_token_id, prefix, lead_tokens=3, lead_weight=4.0)
        loss.backward()
        return loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])

    plain_loss, plain_grads = loss_and_grads(0)
    shared_loss, shared_grads = loss_and_grads(shared)
    assert shared_loss == pytest.approx(plain_loss, abs=1e-5)
    assert torch.allclose(shared_grads, plain_grads, atol=1e-5)
    assert plain_grads.abs().sum() > 0
    assert tiny_sft.shared_prefix([([1] * 40, 35), ([1] * 10 + [2] * 30, 35)]) == 0  # too short to be worth a pass
