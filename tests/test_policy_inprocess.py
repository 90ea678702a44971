"""The inprocess backend: continuous serving through 20 weight publishes, exact log-probs, bad inputs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from claw_train.models import tiny
from claw_train.policy import PolicyError, SamplingParams
from claw_train.policy.inprocess import InProcessPolicy
from claw_train.policy.loader import load_policy

CHAT = [{"role": "user", "content": "Repeat exactly, with nothing else: hello world"}]


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return tiny.build_tiny()


@pytest.fixture
def policy(tiny_path):
    pol = InProcessPolicy(tiny_path, max_batch=4)
    yield pol
    pol.close()


def perturbed(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.02 * torch.randn(v.shape, generator=g) for k, v in state.items()}


def single_threaded(fn):
    """Run ``fn`` in a new thread with one torch thread, as a trainer beside the serving worker would
    (on 2 shared cores, two multi-threaded torch callers slow each other down many times over)."""
    out: dict = {}

    def target() -> None:
        torch.set_num_threads(1)
        try:
            out["value"] = fn()
        except BaseException as err:
            out["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_serves_continuously_while_weights_are_published_20_times(tiny_path, policy):
    base = {k: v.clone() for k, v in policy._active.state_dict().items()}
    versions = {0: base}
    results: dict[int, list] = {i: [] for i in range(3)}
    failures: list[BaseException] = []
    publishing_done = threading.Event()

    def client(i: int) -> None:
        async def loop() -> None:
            sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
            while not publishing_done.is_set():
                try:
                    results[i].append(await policy.generate(CHAT, sampling))
                except BaseException as err:
                    failures.append(err)
            results[i].append(await policy.generate(CHAT, sampling))  # after the last publish

        asyncio.run(loop())

    clients = [threading.Thread(target=client, args=(i,)) for i in results]
    for t in clients:
        t.start()

    def trainer() -> None:
        for v in range(1, 21):
            versions[v] = perturbed(base, v)
            policy.publish(versions[v], v)
            time.sleep(0.03)

    single_threaded(trainer)
    publishing_done.set()
    for t in clients:
        t.join(timeout=60)

    assert failures == []
    seen = set()
    for i, comps in results.items():
        tags = [c.policy_version for c in comps]
        assert tags == sorted(tags), f"client {i} saw versions go backwards: {tags}"
        assert tags[-1] == 20
        seen.update(tags)
    assert len(seen) >= 3, f"new versions must appear while serving, saw {sorted(seen)}"

    # Each completion's tag names the weights that produced all of its tokens: its log-probs are
    # re-computed exactly under that version (a swap mid-generation would break this).
    comps = sorted((c for cs in results.values() for c in cs), key=lambda c: c.policy_version)
    checked = {}
    for c in comps:
        checked.setdefault(c.policy_version, c)
    ref = InProcessPolicy(tiny_path)

    def recompute() -> dict[int, float]:
        gaps = {}
        for v, c in sorted(checked.items()):
            ref.publish(versions[v], v)
            lps = asyncio.run(ref.logprobs(c.prompt_ids, c.token_ids))
            gaps[v] = max(abs(a - b) for a, b in zip(lps, c.logprobs, strict=True))
        return gaps

    try:
        gaps = single_threaded(recompute)
    finally:
        ref.close()
    assert max(gaps.values()) < 1e-4, gaps


async def test_generate_logprobs_match_a_prefill(policy):
    sampling = SamplingParams(max_new_tokens=24, temperature=0.7, top_p=0.9, top_k=50, seed=3)
    comps = await asyncio.gather(
        *[
            policy.generate([{"role": "user", "content": "x" * (i % 3 + 1)}], dataclasses.replace(sampling, seed=i))
            for i in range(6)
        ]
    )  # pairs of equal prompts, as a group's members ask: their shared prefill is computed once
    for c in comps:
        assert len(c.token_ids) == len(c.logprobs) > 0
        prefill = await policy.logprobs(c.prompt_ids, c.token_ids, temperature=0.7)
        assert max(abs(a - b) for a, b in zip(prefill, c.logprobs, strict=True)) < 1e-4
        assert all(lp <= 0 for lp in c.logprobs)


def test_equal_prompts_in_a_batch_are_computed_once_and_decode_as_if_alone(policy):
    a, b = [5, 6, 7, 8], [9, 10]
    rows = []
    model = policy._active
    policy._active = lambda **kw: rows.append(kw["input_ids"].shape[0]) or model(**kw)
    try:
        with torch.inference_mode():
            logits, (cache, mask, last) = policy._forward([a, b, a, a], keep=1)
            alone = {tuple(s): policy._forward([s], keep=1)[0][0] for s in (a, b)}
            step = model(
                input_ids=torch.tensor([[11]] * 4),
                attention_mask=torch.cat([mask, torch.ones((4, 1), dtype=mask.dtype)], dim=1),
                position_ids=(last + 1)[:, None],
                use_cache=True,
                **{policy._cache_arg: cache},
            ).logits[:, -1]
            fresh = {tuple(s): model(input_ids=torch.tensor([[*s, 11]])).logits[0, -1] for s in (a, b)}
    finally:
        policy._active = model
    assert rows[0] == 2  # two distinct prompts, one forward row each
    for row, seq in enumerate([a, b, a, a]):
        assert torch.allclose(logits[row], alone[tuple(seq)], atol=1e-4)
        assert torch.allclose(step[row], fresh[tuple(seq)], atol=1e-4)  # each row's copied cache decodes on its own


async def test_messages_are_rendered_with_the_generation_prompt(policy):
    comp = await policy.generate(CHAT, SamplingParams(max_new_tokens=3, seed=0))
    text = policy.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert comp.prompt_ids == policy.tokenizer.encode(text, add_special_tokens=False)
    same = await policy.generate(comp.prompt_ids, SamplingParams(max_new_tokens=3, seed=0))
    assert same.token_ids == comp.token_ids


async def test_seeded_sampling_is_reproducible_and_finish_reasons_are_right(policy):
    sampling = SamplingParams(max_new_tokens=20, temperature=1.0, seed=11)
    a = await policy.generate(CHAT, sampling)
    b = await policy.generate(CHAT, sampling)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    other = await policy.generate(CHAT, SamplingParams(max_new_tokens=20, temperature=1.0, seed=12))
    assert other.token_ids != a.token_ids
    assert a.finish_reason == ("stop" if a.token_ids[-1] in policy.eos_ids else "length")
    assert len(a.token_ids) <= 20
    greedy = await policy.generate(CHAT, SamplingParams(max_new_tokens=5, temperature=0.0))
    assert (
        greedy.token_ids == (await policy.generate(CHAT, SamplingParams(max_new_tokens=5, temperature=0.0))).token_ids
    )

    # Stop strings end a generation ("stop") and stay in the text (token-exact).
    free = await policy.generate(CHAT, SamplingParams(max_new_tokens=6, temperature=0.0))
    stop_at = policy.tokenizer.decode(free.token_ids[:2])
    cut = await policy.generate(CHAT, SamplingParams(max_new_tokens=6, temperature=0.0, stop=(stop_at,)))
    assert cut.finish_reason == "stop" and cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert stop_at in cut.text and len(cut.token_ids) <= 2


async def test_end_of_turn_token_stops_generation(policy):
    prompt = [5, 6, 7]  # no end-of-turn token inside, so changing its embedding leaves the prompt alone
    with torch.no_grad():
        h = policy._active.model(input_ids=torch.tensor([prompt])).last_hidden_state[0, -1]
    state = {k: v.clone() for k, v in policy._active.state_dict().items()}
    eos = policy.eos_ids[0]
    state["model.embed_tokens.weight"][eos] = 100 * h / h.norm()  # tied with lm_head: a huge logit for eos
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    policy.publish(state, 1)
    done = await policy.generate(prompt, SamplingParams(max_new_tokens=20, seed=0))
    assert (done.token_ids, done.finish_reason, done.text, done.policy_version) == ([eos], "stop", "", 1)


async def test_bad_weight_updates_fail_to_the_publisher_and_old_weights_keep_serving(policy, tmp_path):
    from safetensors.torch import save_file

    sampling = SamplingParams(max_new_tokens=12, seed=5)
    before = await policy.generate(CHAT, sampling)
    state = {k: v.clone() for k, v in perturbed(policy._active.state_dict(), 1).items() if k != "lm_head.weight"}
    good = tmp_path / "model.safetensors"
    save_file(state, str(good))
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(PolicyError, match="truncated or corrupt"):
        policy.publish(truncated, 1)
    with pytest.raises(PolicyError, match="does not exist"):
        policy.publish(tmp_path / "missing.safetensors", 1)
    bad_shape = {**state, "model.norm.weight": torch.ones(3)}
    with pytest.raises(PolicyError, match="shape"):
        policy.publish(bad_shape, 1)
    with pytest.raises(PolicyError, match="names the model does not"):
        policy.publish({**state, "extra.weight": torch.ones(2)}, 1)
    with pytest.raises(PolicyError, match="lack"):
        policy.publish({"model.norm.weight": state["model.norm.weight"]}, 1)
    with pytest.raises(PolicyError, match="NaN"):
        policy.publish({**state, "model.norm.weight": torch.full_like(state["model.norm.weight"], float("nan"))}, 1)
    with pytest.raises(PolicyError, match="state dict or a path"):
        policy.publish(42, 1)
    after = await policy.generate(CHAT, sampling)
    assert (after.token_ids, after.policy_version) == (before.token_ids, 0)

    policy.publish(good, 2)  # a good file (tied lm_head left out, as save_pretrained does) goes live
    live = await policy.generate(CHAT, sampling)
    assert live.policy_version == 2 and live.logprobs != before.logprobs
    with pytest.raises(PolicyError, match="older than"):
        policy.publish(state, 1)


async def test_bad_requests_fail_only_themselves(policy):
    with pytest.raises(PolicyError, match="outside the vocabulary"):
        await policy.generate([1, 2, 10**9], SamplingParams())
    with pytest.raises(PolicyError, match="empty prompt"):
        await policy.generate([], SamplingParams())
    with pytest.raises(PolicyError, match="chat messages"):
        await policy.generate(["not a message"], SamplingParams())
    with pytest.raises(PolicyError, match="top_p"):
        await policy.generate(CHAT, SamplingParams(top_p=0.0))
    with pytest.raises(PolicyError, match=r"the model's context is \d+: shorten the chat .*--max-turns"):
        await policy.generate([5] * (policy.max_positions + 1), SamplingParams())
    assert (await policy.generate(CHAT, SamplingParams(max_new_tokens=2))).token_ids
    policy.close()
    with pytest.raises(PolicyError, match="closed"):
        await policy.generate(CHAT, SamplingParams())


def test_model_paths_that_are_not_causal_lms_are_refused(tmp_path):
    with pytest.raises(PolicyError, match="does not exist"):
        InProcessPolicy(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(PolicyError, match=r"no config\.json"):
        InProcessPolicy(tmp_path)
    with pytest.raises(PolicyError, match="is a file"):
        InProcessPolicy(tmp_path / "notes.txt")
    vision = tmp_path / "vision"
    vision.mkdir()
    (vision / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(PolicyError, match="not a causal language model"):
        InProcessPolicy(vision)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(PolicyError, match="not valid JSON"):
        InProcessPolicy(broken)


def test_load_policy_resolves_names_and_refuses_unknown_schemes(tiny_path, tmp_path):
    with pytest.raises(PolicyError, match="unknown policy 'grpc://x'"):
        load_policy(str(tiny_path), "grpc://x")
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy(str(tmp_path / "nope"))
    with pytest.raises(PolicyError, match="no server"):
        load_policy(str(tiny_path), "sglang://")
    pol = load_policy(str(tiny_path), "inprocess", max_batch=2)
    try:
        assert isinstance(pol, InProcessPolicy) and pol.max_batch == 2
    finally:
        pol.close()


def test_the_worker_leaves_the_cores_to_a_training_step_and_takes_them_back(policy, monkeypatch):
    monkeypatch.setenv("CLAW_POLICY_THREADS", "3")  # the cap outside a step (claw-train sets it from OMP_NUM_THREADS)
    seen: list[int] = []
    original = torch.set_num_threads

    def record(n: int) -> None:
        seen.append(n)
        original(n)

    sampling = SamplingParams(max_new_tokens=2, seed=0)
    torch.set_num_threads = record  # the worker calls it before a batch whose thread count differs
    try:
        asyncio.run(policy.generate(CHAT, sampling))
        policy.set_training(True)
        assert policy.worker_threads() == 1
        asyncio.run(policy.generate(CHAT, sampling))
        policy.set_training(False)
        asyncio.run(policy.generate(CHAT, sampling))
    finally:
        torch.set_num_threads = original
    assert policy.worker_threads() == 3
    assert seen == [3, 1, 3]
    monkeypatch.delenv("CLAW_POLICY_THREADS")
    assert policy.worker_threads() == (os.cpu_count() or 1)  # unset: every core


def recording_rows(policy: InProcessPolicy) -> list[int]:
    """Record the rows of every forward the serving model runs (prefills and decode steps)."""
    rows: list[int] = []
    record = lambda module, args, kwargs: rows.append(kwargs["input_ids"].shape[0])  # noqa: E731
    policy._active.register_forward_pre_hook(record, with_kwargs=True)  # a published copy keeps it
    return rows


async def until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_a_request_joins_the_running_batch_and_leaves_it_when_it_ends(policy):
    long_sampling = SamplingParams(max_new_tokens=64, temperature=1.0, seed=1)
    alone = await policy.generate(CHAT, long_sampling)
    rows = recording_rows(policy)
    long = asyncio.create_task(policy.generate(CHAT, long_sampling))
    await until(lambda: len(rows) >= 4)  # the long reply is decoding
    short = await policy.generate([5, 6, 7, 8, 9], SamplingParams(max_new_tokens=3, temperature=1.0, seed=2))
    assert not long.done(), "the short request waited for the long one's batch to end"
    done = await long
    joined = rows.index(2)  # the first decode step with both rows, after the short one's own prefill
    assert rows[:joined].count(1) >= 5 and rows[joined - 1] == 1
    assert rows[joined : joined + 2] == [2, 2] and set(rows[joined + 2 :]) == {1}  # it left after its 3 tokens
    assert len(short.token_ids) == 3 and len(done.token_ids) == 64
    assert done.token_ids == alone.token_ids  # a seeded row samples the same tokens whoever shares its batch
    for comp in (short, done):
        prefill = await policy.logprobs(comp.prompt_ids, comp.token_ids, temperature=1.0)
        assert max(abs(a - b) for a, b in zip(prefill, comp.logprobs, strict=True)) < 1e-4


async def test_a_published_version_goes_live_when_the_running_batch_has_ended(policy):
    rows = recording_rows(policy)
    long = asyncio.create_task(policy.generate(CHAT, SamplingParams(max_new_tokens=48, temperature=1.0, seed=1)))
    await until(lambda: len(rows) >= 4)
    new = perturbed({k: v.clone() for k, v in policy._active.state_dict().items()}, 1)
    policy.publish(new, 1)
    short = asyncio.create_task(policy.generate([5, 6, 7], SamplingParams(max_new_tokens=3, seed=2)))
    first = (await asyncio.wait({long, short}, return_when=asyncio.FIRST_COMPLETED))[0]
    assert first == {long}  # no row joins the old version's batch once a new version is staged
    assert (long.result().policy_version, (await short).policy_version) == (0, 1)
    assert max(rows[rows.index(1, 4) :]) == 1


async def test_the_kv_cache_budget_bounds_the_running_batch(tiny_path):
    probe = InProcessPolicy(tiny_path, max_batch=1)
    ids = probe.prompt_ids(CHAT)
    per_row = probe.kv_bytes * (len(ids) + 16)
    probe.close()
    assert per_row > 0
    policy = InProcessPolicy(tiny_path, max_batch=8, kv_cache_mb=2.5 * per_row / 2**20)  # room for two rows
    try:
        rows = recording_rows(policy)
        sampling = SamplingParams(max_new_tokens=16, temperature=1.0)
        comps = await asyncio.gather(*(policy.generate(ids, sampling) for _ in range(6)))
        assert [len(c.token_ids) for c in comps] == [16] * 6
        assert max(rows) == 2
    finally:
        policy.close()
    with pytest.raises(ValueError, match="kv_cache_mb"):
        InProcessPolicy(tiny_path, kv_cache_mb=0)


async def test_a_bfloat16_serving_copy_records_what_it_sampled(tiny_path, monkeypatch):
    import claw_train.policy.loader as loader

    monkeypatch.setattr(loader, "native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no native bf16"):
        policy = load_policy(str(tiny_path), dtype="bfloat16")
    try:
        assert next(policy._active.parameters()).dtype == torch.bfloat16
        comp = await policy.generate(CHAT, SamplingParams(max_new_tokens=12, temperature=1.0, seed=3))
        prefill = await policy.logprobs(comp.prompt_ids, comp.token_ids, temperature=1.0)
        assert len(comp.logprobs) == 12 and all(lp <= 0 for lp in comp.logprobs)
        assert max(abs(a - b) for a, b in zip(prefill, comp.logprobs, strict=True)) < 0.1  # bf16 rounding only
    finally:
        policy.close()
    with pytest.raises(PolicyError, match="float32, bfloat16 or auto"):
        load_policy(str(tiny_path), dtype="float16")
    assert loader.serving_dtype("auto") == torch.float32  # no native bf16 here (as patched above)
    monkeypatch.setattr(loader, "native_bf16", lambda: True)
    assert loader.serving_dtype("auto") == torch.bfloat16


async def test_a_cache_that_cannot_be_merged_runs_each_batch_to_its_end(policy, monkeypatch):
    import claw_train.policy.decode as decode

    monkeypatch.setattr(decode, "mergeable", lambda cache: False)  # as a model with sliding windows or recurrent state
    rows = recording_rows(policy)
    long = asyncio.create_task(policy.generate(CHAT, SamplingParams(max_new_tokens=32, temperature=1.0, seed=1)))
    await until(lambda: len(rows) >= 4)
    short = await policy.generate([5, 6, 7], SamplingParams(max_new_tokens=3, temperature=1.0, seed=2))
    assert long.done() and len(long.result().token_ids) == 32 and len(short.token_ids) == 3
    assert max(rows) == 1  # the short request waited for the long one's batch to end
