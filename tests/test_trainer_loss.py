"""ClawTrainer: TRL's loss on our batches equals a hand-written asymmetric-clip PPO loss; every method learns.

A tiny Qwen3 (a few thousand parameters) built in the test keeps this file fast.
"""

from __future__ import annotations

import json
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from claw_train.advantages import MethodSettings, method_advantages  # noqa: E402
from claw_train.samples.records import TrainSample, TurnRecord  # noqa: E402
from claw_train.training.batch import collate, length_groups  # noqa: E402
from claw_train.training.trainer import (  # noqa: E402
    ClawConfig,
    ClawTrainer,
    FeedClosed,
    QueueSource,
    WeightPublisher,
    serving_state_dict,
)

pytestmark = pytest.mark.slow

VOCAB = 48
PAD, EOS = 0, 1


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS, "<unk>": 2} | {f"t{i}": i for i in range(3, VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def tiny_model(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=EOS,
    )
    return Qwen3ForCausalLM(cfg)


def completion_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0) -> list[float]:
    """Log-probs of ``completion`` after ``prompt``, computed alone (no padding) — the behaviour policy's view."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def make_sample(i: int, rng: random.Random, *, advantages=None, logprobs=None, version: int = 0, prompt=None):
    prompt = prompt or [rng.randrange(3, VOCAB) for _ in range(rng.randrange(2, 7))]
    completion = [rng.randrange(3, VOCAB) for _ in range(rng.randrange(1, 6))]
    turn = TurnRecord(
        episode_id=f"e{i}",
        group_id="g",
        task_id="t",
        step_index=1,
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=logprobs or [rng.uniform(-5.0, -2.0) for _ in completion],
        policy_version=version,
        messages=[],
        action_text="",
    )
    adv = advantages if advantages is not None else [rng.uniform(-1.0, 1.0) for _ in completion]
    return TrainSample(turn=turn, advantages=adv, method="combined", score=None, sample_id=f"s{i}")


def make_trainer(tmp_path, model, tokenizer, source, **overrides):
    callbacks = overrides.pop("callbacks", None)
    busy = overrides.pop("busy", None)
    values = {"max_steps": 1, "report_to": "none", "save_strategy": "no", "samples_per_step": 4}
    values["per_device_train_batch_size"] = overrides.pop("per_device_train_batch_size", 4)
    args = ClawConfig.for_model("tiny", tmp_path / "out", **(values | overrides))
    return ClawTrainer(model, args, source=source, processing_class=tokenizer, callbacks=callbacks, busy=busy)


def hand_ppo_loss(model, samples, temperature: float, eps_low=0.2, eps_high=0.28) -> torch.Tensor:
    """Asymmetric-clip PPO, token-level, normalised by the number of completion tokens in the batch (dapo)."""
    total = torch.zeros((), dtype=torch.float64)
    n_tokens = 0
    for s in samples:
        new = torch.tensor(completion_logprobs(model, s.turn.prompt_ids, s.turn.completion_ids, temperature))
        old = torch.tensor(s.turn.logprobs)
        adv = torch.tensor(s.advantages)
        ratio = torch.exp(new - old)
        clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
        total += (-torch.minimum(ratio * adv, clipped * adv)).double().sum()
        n_tokens += len(adv)
    return total / n_tokens


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_loss_equals_hand_written_asymmetric_clip_ppo(tmp_path, tokenizer, temperature):
    model = tiny_model()
    rng = random.Random(1)
    samples = []
    for i in range(4):
        s = make_sample(i, rng)
        true = completion_logprobs(model, s.turn.prompt_ids, s.turn.completion_ids, temperature)
        # behaviour log-probs around the truth: ratios on both sides of both clip edges
        s.turn.logprobs = [lp + rng.choice([-0.6, -0.1, 0.05, 0.4]) for lp in true]
        samples.append(s)
    source = QueueSource()
    for s in samples:
        source.put(s)
    trainer = make_trainer(tmp_path, model, tokenizer, source, temperature=temperature)
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # what the training loop sets for one micro-batch per step
    inputs = trainer._prepare_inputs([{"prompt": ""}] * 4)
    loss = trainer.compute_loss(trainer.model, inputs)
    expected = hand_ppo_loss(model, samples, temperature)
    assert abs(loss.item() - expected.item()) < 1e-6
    assert trainer.args.epsilon == 0.2 and trainer.args.epsilon_high == 0.28 and trainer.args.beta == 0.0
    # both clip edges were exercised, so the test would see a symmetric or missing clip
    ratios = [
        r
        for s in samples
        for r in torch.exp(
            torch.tensor(completion_logprobs(model, s.turn.prompt_ids, s.turn.completion_ids, temperature))
            - torch.tensor(s.turn.logprobs)
        ).tolist()
    ]
    assert min(ratios) < 0.8 and max(ratios) > 1.28


def test_replay_adds_its_weighted_cross_entropy_to_the_loss_and_moves_the_weights(tmp_path, tokenizer):
    """``--replay C``: the step's loss is TRL's plus C times the demonstrations' completion cross-entropy (by hand)."""
    from claw_train.training.replay import Replay

    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    rows = [{"messages": [{"role": "user", "content": "t5 t6 t7"}], "completion": "t9 t10"}]
    model = tiny_model()
    rng = random.Random(3)
    source = QueueSource()
    samples = [make_sample(i, rng) for i in range(4)]
    for s in samples:
        s.turn.logprobs = completion_logprobs(model, s.turn.prompt_ids, s.turn.completion_ids)
        source.put(s)
    trainer = make_trainer(tmp_path, model, tokenizer, source)
    trainer.replay = Replay(rows, tokenizer, coef=2.0)
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, trainer._prepare_inputs([{"prompt": ""}] * 4))
    replayed = -sum(completion_logprobs(model, [5, 6, 7], [9, 10, EOS])) / 3
    assert loss.item() == pytest.approx(hand_ppo_loss(model, samples, 1.0).item() + 2.0 * replayed, abs=1e-5)
    assert trainer.metric_values("claw/replay_loss") == [pytest.approx(replayed, abs=1e-5)]
    model = tiny_model()
    before = completion_logprobs(model, [5, 6, 7], [9, 10, EOS])
    source = QueueSource()
    for i in range(8):  # advantages 0: the replay term alone moves the weights
        sample = make_sample(i, rng)
        sample.advantages = [0.0] * len(sample.turn.completion_ids)
        source.put(sample)
    trainer = make_trainer(tmp_path, model, tokenizer, source, max_steps=2)
    trainer.replay = Replay(rows, tokenizer, coef=1.0)
    trainer.train()
    assert trainer.counters["trained"] == 8
    assert sum(completion_logprobs(model, [5, 6, 7], [9, 10, EOS])) > sum(before) + 0.01


def test_collate_pads_prompts_left_and_completions_right():
    rng = random.Random(0)
    a, b = make_sample(0, rng, prompt=[5, 6]), make_sample(1, rng, prompt=[7, 8, 9, 10])
    batch = collate([a, b], PAD)
    assert batch["prompt_ids"][0].tolist() == [PAD, PAD, 5, 6]
    assert batch["prompt_mask"][0].tolist() == [0, 0, 1, 1]
    n = len(a.turn.completion_ids)
    assert batch["completion_ids"][0, :n].tolist() == a.turn.completion_ids
    assert batch["completion_mask"][0].sum().item() == n
    assert batch["advantages"][0, :n].tolist() == pytest.approx(a.advantages)
    assert batch["old_per_token_logps"][0, :n].tolist() == pytest.approx(a.turn.logprobs)
    assert batch["num_items_in_batch"].item() == n + len(b.turn.completion_ids)


def test_rows_of_similar_length_are_grouped_and_the_loss_and_gradients_stay_the_same(tmp_path, tokenizer):
    from trl import GRPOTrainer

    rng = random.Random(3)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 40, 5, 38, 12, 60)]
    samples = [make_sample(i, rng, prompt=p) for i, p in enumerate(prompts)]
    batch = collate(samples, PAD)
    groups = length_groups(batch)
    assert [g["prompt_ids"].size(0) for g in groups] == [1, 2, 1, 2]  # 60 | 40, 38 | 12 | 5, 3 (+ completions)
    assert sum(int(g["completion_mask"].sum()) for g in groups) == int(batch["completion_mask"].sum())
    width = batch["prompt_ids"].size(1) + batch["completion_ids"].size(1)
    padded = sum(g["prompt_ids"].numel() + g["completion_ids"].numel() for g in groups)
    assert padded < 0.7 * len(samples) * width  # the padding the groups leave out
    assert all(g["num_items_in_batch"] is batch["num_items_in_batch"] for g in groups)  # the step's normaliser

    trainer = make_trainer(tmp_path, tiny_model(), tokenizer, QueueSource(), samples_per_step=6,
                           per_device_train_batch_size=6)  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1

    def loss_and_grads(parts):
        trainer.model.zero_grad()
        loss = sum(GRPOTrainer.compute_loss(trainer, trainer.model, part) for part in parts)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    whole, whole_grads = loss_and_grads([batch])
    grouped, grouped_grads = loss_and_grads(groups)
    assert grouped == pytest.approx(whole, abs=1e-6)
    assert max((grouped_grads[n] - g).abs().max().item() for n, g in whole_grads.items()) < 1e-5
    assert length_groups(collate(samples[:1], PAD))[0]["prompt_ids"].size(1) == 3  # one row: one group


def test_a_token_budget_splits_the_step_into_micro_batches_with_the_same_loss_and_gradients(tmp_path, tokenizer):
    """Long rows bound an update's memory by the budget: each micro-batch is backpropagated on its own, and the loss
    and gradients are the whole batch's."""
    from trl import GRPOTrainer

    rng = random.Random(5)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (40, 38, 36, 35, 12, 11)]
    samples = [make_sample(i, rng, prompt=p) for i, p in enumerate(prompts)]
    batch = collate(samples, PAD)
    lengths = [len(s.turn.prompt_ids) + len(s.turn.completion_ids) for s in samples]
    budget = 2 * max(lengths)
    parts = length_groups(batch, max_tokens=budget)
    assert all(
        g["prompt_ids"].size(0) * (g["prompt_ids"].size(1) + g["completion_ids"].size(1)) <= budget for g in parts
    )
    assert len(parts) > len(length_groups(batch)) and sum(g["prompt_ids"].size(0) for g in parts) == len(samples)
    assert [g["prompt_ids"].size(0) for g in length_groups(batch, max_tokens=1)] == [1] * len(samples)

    trainer = make_trainer(tmp_path, tiny_model(), tokenizer, QueueSource(), samples_per_step=6,
                           per_device_train_batch_size=6, micro_batch_tokens=budget)  # fmt: skip
    assert trainer.micro_batch_tokens == budget
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1

    def grads() -> dict[str, torch.Tensor]:
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    trainer.model.zero_grad()
    whole = GRPOTrainer.compute_loss(trainer, trainer.model, batch)
    whole.backward()
    whole_grads = grads()
    trainer.model.zero_grad()
    split = trainer.compute_loss(trainer.model, batch)  # backpropagates all micro-batches but the last itself
    split.backward()
    assert split.item() == pytest.approx(whole.item(), abs=1e-6)
    assert max((grads()[n] - g).abs().max().item() for n, g in whole_grads.items()) < 1e-5


def _opd_sample(model, i, rng, method, score):
    """A turn judged with ``score`` whose hint makes the teacher prefer the completion differently."""
    s = make_sample(i, rng)
    old = completion_logprobs(model, s.turn.prompt_ids, s.turn.completion_ids)
    hinted = [*s.turn.prompt_ids, 40, 41, 42]  # the hint appended to the prompt
    teacher = completion_logprobs(model, hinted, s.turn.completion_ids)
    s.turn.logprobs = old
    adv = method_advantages(
        method, len(old), score=score, teacher_logprobs=teacher, old_logprobs=old, w_rl=1.0, w_opd=1.0
    )
    assert adv is not None
    s.advantages = adv
    return s


@pytest.mark.parametrize("method", ["binary", "opd", "combined"])
def test_every_method_updates_the_weights(tmp_path, tokenizer, method):
    model = tiny_model()
    rng = random.Random(2)
    source = QueueSource()
    for i in range(4):
        source.put(_opd_sample(model, i, rng, method, score=rng.choice([-1, 1])))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    said: list[bool] = []
    trainer = make_trainer(tmp_path, model, tokenizer, source, busy=said.append)
    trainer.train()
    assert said == [True, False]  # busy from the step's samples to its end: a serving policy's cue
    moved = max((model.state_dict()[k] - before[k]).abs().max().item() for k in before)
    assert moved > 1e-6
    assert trainer.counters["trained"] == 4


def test_beta_anchors_the_kl_term_at_the_initial_weights(tmp_path, tokenizer):
    """``beta`` > 0 (TRL's KL term): each step's reference log-probs are the initial model's, while the policy moves."""
    from transformers import AutoModelForCausalLM

    tiny_model().save_pretrained(tmp_path / "model")  # TRL loads the reference from the policy's path
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.float32).eval()
    rng = random.Random(5)
    source = QueueSource()
    samples = [_opd_sample(model, i, rng, "combined", score=rng.choice([-1, 1])) for i in range(12)]
    for sample in samples:
        source.put(sample)
    trainer = make_trainer(tmp_path, model, tokenizer, source, beta=0.5, max_steps=3)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    reference = trainer._reference_logps

    def recorded(batch):
        logps = reference(batch)
        seen.append((logps, batch["completion_mask"]))
        return logps

    trainer._reference_logps = recorded
    trainer.train()
    assert len(seen) == 3 and trainer.counters["trained"] == 12
    for step, (logps, mask) in enumerate(seen):
        for row, sample in enumerate(samples[4 * step : 4 * step + 4]):
            want = completion_logprobs(initial, sample.turn.prompt_ids, sample.turn.completion_ids)
            got = logps[row][mask[row].bool()].tolist()
            assert got == pytest.approx(want, abs=1e-5)
    moved = max((model.state_dict()[k] - initial.state_dict()[k]).abs().max().item() for k in initial.state_dict())
    assert moved > 1e-6  # so the KL term had something to measure


def test_beta_with_lora_anchors_the_kl_term_at_the_base_model(tmp_path, tokenizer):
    """With LoRA the reference is the model with its adapter switched off: the base weights, even after steps."""
    from peft import LoraConfig

    model, base = tiny_model(), tiny_model().eval()  # same seed: the same weights
    rng = random.Random(6)
    source = QueueSource()
    samples = [_opd_sample(model, i, rng, "combined", score=rng.choice([-1, 1])) for i in range(8)]
    for sample in samples:
        source.put(sample)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    args = ClawConfig.for_model(
        "tiny", tmp_path / "out", max_steps=2, report_to="none", save_strategy="no", samples_per_step=4,
        per_device_train_batch_size=4, beta=0.5,
    )  # fmt: skip
    trainer = ClawTrainer(model, args, source=source, processing_class=tokenizer, peft_config=lora)
    assert trainer.ref_model is None
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    reference = trainer._reference_logps
    trainer._reference_logps = lambda batch: seen.append((reference(batch), batch["completion_mask"])) or seen[-1][0]
    trainer.train()
    assert len(seen) == 2
    for step, (logps, mask) in enumerate(seen):
        for row, sample in enumerate(samples[4 * step : 4 * step + 4]):
            want = completion_logprobs(base, sample.turn.prompt_ids, sample.turn.completion_ids)
            assert logps[row][mask[row].bool()].tolist() == pytest.approx(want, abs=1e-5)
    adapted = completion_logprobs(trainer.model, samples[0].turn.prompt_ids, samples[0].turn.completion_ids)
    base_logps = completion_logprobs(base, samples[0].turn.prompt_ids, samples[0].turn.completion_ids)
    assert max(abs(a - b) for a, b in zip(adapted, base_logps, strict=True)) > 1e-6  # the adapter is on again


def test_lora_opd_term_moves_lora_parameters_and_reaches_serving(tmp_path, tokenizer):
    from peft import LoraConfig

    model = tiny_model()
    rng = random.Random(3)
    source = QueueSource()
    for i in range(4):
        s = _opd_sample(model, i, rng, "combined", score=0)  # zero scalar reward: only the teacher gap remains
        assert any(abs(a) > 1e-4 for a in s.advantages)
        source.put(s)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    published: list[tuple[dict, int]] = []
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    args = ClawConfig.for_model(
        "tiny", tmp_path / "out", max_steps=1, report_to="none", save_strategy="no", samples_per_step=4,
        per_device_train_batch_size=4,
    )  # fmt: skip
    trainer = ClawTrainer(
        model,
        args,
        source=source,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[WeightPublisher(lambda w, v: published.append((w, v)))],
    )
    lora_before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    assert lora_before
    trainer.train()
    lora_after = dict(trainer.model.named_parameters())
    assert max((lora_after[k] - v).abs().max().item() for k, v in lora_before.items()) > 1e-6
    # the serving copy gets base names with the LoRA delta merged in; the base weights themselves are untouched
    assert [v for _, v in published] == [1]  # a new run publishes no v0: its policy already serves those weights
    served = published[-1][0]
    assert set(served) == set(base)
    assert (
        served["model.layers.0.self_attn.q_proj.weight"] - base["model.layers.0.self_attn.q_proj.weight"]
    ).abs().max() > 0
    assert torch.equal(served["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])
    merged = tiny_model()
    merged.load_state_dict(served)
    s = make_sample(9, rng)
    assert completion_logprobs(merged, s.turn.prompt_ids, s.turn.completion_ids) == pytest.approx(
        completion_logprobs(trainer.model, s.turn.prompt_ids, s.turn.completion_ids), abs=1e-5
    )
    assert serving_state_dict(trainer.model).keys() == base.keys()


@pytest.mark.timeout(60)
def test_stale_and_malformed_samples_are_dropped_and_counted(tmp_path, tokenizer):
    model = tiny_model()
    rng = random.Random(4)
    source = QueueSource()
    bad = make_sample(1, rng)
    bad.advantages = [*bad.advantages[:-1], float("nan")]
    short = make_sample(2, rng)
    short.turn.logprobs = [*short.turn.logprobs, 0.0]
    for s in [make_sample(0, rng), bad, short, *(make_sample(i, rng) for i in range(3, 6))]:
        source.put(s)  # step 0 (version 0): 0, 3, 4, 5 train; the two malformed ones are dropped
    for i in range(6, 8):
        source.put(make_sample(i, rng, version=0))  # step 1 (version 1): one version old > max_staleness 0
    for i in range(8, 12):
        source.put(make_sample(i, rng, version=1))
    source.close()
    trainer = make_trainer(tmp_path, model, tokenizer, source, max_steps=2, max_staleness=0)
    trainer.train()
    assert trainer.counters["trained"] == 8
    assert trainer.counters["invalid_dropped"] == 2
    assert trainer.counters["stale_dropped"] == 2
    assert any("non-finite" in r for r in trainer.invalid_reasons)
    assert any("log-probs" in r for r in trainer.invalid_reasons)
    logged = [h for h in trainer.state.log_history if "claw/stale_dropped" in h]
    assert [h["claw/stale_dropped"] for h in logged] == [0.0, 2.0]


@pytest.mark.timeout(60)
def test_samples_within_max_staleness_are_kept(tmp_path, tokenizer):
    model = tiny_model()
    rng = random.Random(5)
    source = QueueSource()
    for i in range(8):
        source.put(make_sample(i, rng, version=0))  # steps 0 and 1: at most one version old
    for i in range(8, 12):
        source.put(make_sample(i, rng, version=1))  # step 2: one version old
    source.close()
    trainer = make_trainer(tmp_path, model, tokenizer, source, max_steps=4, max_staleness=1)
    with pytest.raises(FeedClosed):
        trainer.train()  # step 3 finds the source closed
    assert trainer.counters["trained"] == 12
    assert trainer.counters["stale_dropped"] == 0


@pytest.mark.timeout(60)
def test_nan_loss_skips_the_step_without_touching_weights(tmp_path, tokenizer):
    model = tiny_model()
    rng = random.Random(6)
    source = QueueSource()
    for i in range(4):
        s = make_sample(i, rng)
        if i == 0:
            s.turn.logprobs[0] = float("nan")  # a broken behaviour log-prob: the loss is NaN
        source.put(s)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = make_trainer(tmp_path, model, tokenizer, source)
    trainer.train()
    assert trainer.counters["nan_skipped"] == 1
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    assert trainer.state.global_step == 1


@pytest.mark.timeout(60)
def test_closed_source_stops_the_trainer(tmp_path, tokenizer):
    source = QueueSource()
    source.close()
    trainer = make_trainer(tmp_path, tiny_model(), tokenizer, source)
    with pytest.raises(FeedClosed):
        trainer.train()


def test_config_defaults_and_presets(tmp_path):
    cfg = ClawConfig.for_model("Qwen/Qwen3-4B", tmp_path, report_to="none")
    assert (cfg.learning_rate, cfg.weight_decay, cfg.adam_beta2) == (1e-5, 0.1, 0.98)
    assert cfg.loss_type == "dapo" and cfg.lr_scheduler_type == "constant" and cfg.samples_per_step == 16
    assert cfg.use_cpu and not cfg.bf16 and not cfg.gradient_checkpointing
    tiny = ClawConfig.for_model("tiny", tmp_path, report_to="none", per_device_train_batch_size=4)
    assert tiny.learning_rate != cfg.learning_rate
    assert tiny.gradient_accumulation_steps == 4 and tiny.steps_per_generation == 4
    small = ClawConfig.for_model("smollm2", tmp_path, report_to="none").learning_rate
    assert tiny.learning_rate != small != cfg.learning_rate
    # a local model: tiny by its width, else small or the paper's by its estimated size
    for hidden, layers, preset_lr in ((128, 2, tiny.learning_rate), (576, 30, small), (2560, 36, 1e-5)):
        model_dir = tmp_path / f"model-{hidden}"
        model_dir.mkdir()
        sizes = {"hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": 3 * hidden}
        (model_dir / "config.json").write_text(json.dumps({"model_type": "qwen3", "vocab_size": 49152, **sizes}))
        assert ClawConfig.for_model(model_dir, tmp_path, report_to="none").learning_rate == preset_lr
    with pytest.raises(ValueError, match="method"):  # the one definition of a method refuses it
        MethodSettings("ppo")
    with pytest.raises(ValueError, match="multiple"):
        ClawConfig.for_model("tiny", tmp_path, per_device_train_batch_size=5, report_to="none")


@pytest.mark.timeout(60)
def test_weights_published_to_disk_for_remote_servers(tmp_path, tokenizer):
    """With a remote policy (SGLang) the publisher saves a Hugging Face model directory per version."""
    from transformers import AutoModelForCausalLM

    model = tiny_model()
    rng = random.Random(7)
    source = QueueSource()
    for i in range(4):
        source.put(make_sample(i, rng))
    published: list[tuple[object, int]] = []
    publisher = WeightPublisher(lambda w, v: published.append((w, v)), to_disk=tmp_path / "weights")
    trainer = make_trainer(tmp_path, model, tokenizer, source, callbacks=[publisher])
    trainer.train()
    assert [v for _, v in published] == [1]
    path = published[-1][0]
    assert path == tmp_path / "weights" / "v1"
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


@pytest.mark.parametrize("step", [5, 6])
def test_a_step_of_any_size_trains_every_sample_once(tmp_path, tokenizer, step):
    """TRL takes a step's rows in groups of ``num_generations``; claw's samples are not grouped, so a step of 5 (odd)
    trains like one of 6 (TRL's default groups of 2 refused odd steps with an error once the run had started)."""
    rng = random.Random(3)
    source = QueueSource()
    for i in range(step):
        source.put(make_sample(i, rng))
    trainer = make_trainer(
        tmp_path, tiny_model(), tokenizer, source, samples_per_step=step, per_device_train_batch_size=step
    )
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.counters["trained"] == step
    assert source.qsize() == 0


def test_lora_targets_the_model_does_not_have_are_a_clear_error():
    from claw_train.options.tree import ConfigError, TrainingConfig
    from claw_train.training.options import check_lora_targets

    model = tiny_model()
    check_lora_targets(model, TrainingConfig(lora=True, lora_targets="q_proj, v_proj"))
    check_lora_targets(model, TrainingConfig(lora=True))  # all-linear
    check_lora_targets(model, TrainingConfig(lora=False, lora_targets="nothing"))  # not used without --lora
    with pytest.raises(ConfigError, match=r"no linear layer named qproj; its linear layers are .*q_proj.*all-linear"):
        check_lora_targets(model, TrainingConfig(lora=True, lora_targets="qproj,v_proj"))
