"""The real model's speed on this CPU: generation and training tokens/s, each against the bare operation on the
same batch and against the bound the machine's measured matmul rate sets.

* **Generation**: ``--batch`` chat prompts (held-out conversation problems), ``--new-tokens`` each, sampled at the
  preset's temperature. Ours: claw's in-process policy (the batched sampler the pipeline serves with, which also
  records every token's log-prob). Bare: ``model.generate`` on the same prompts, left-padded into one batch.
* **Training**: one optimizer update on ``--batch`` samples of the same lengths. Ours: claw's trainer (TRL's loss,
  LoRA r16 as the preset). Bare: one forward + backward + optimizer step of the same LoRA model on the same padded
  batch, cross-entropy on the completion tokens.
* **Bound**: tokens/s if every matmul ran at the rate measured here (``torch.mm``, fp32, all threads), counting
  2 FLOPs per parameter per generated token and 4 per trained token with LoRA (forward, and the backward through
  activations only: the frozen weights get no gradient).

Each figure is measured in this run, at one thread count for both sides (``--threads``, default: all cores).
Prints a table and writes ``bench/results/real-model-throughput.json`` (``--results DIR``, ``--name NAME`` to write
elsewhere): ``model``, ``parameters``, ``threads``, ``repeats``, ``temperature``, ``matmul_flops`` and
``matmul_gflop_s``, ``batch``, ``new_tokens``, ``trained_tokens``, and ``generation`` and ``training`` (each
``ours_tok_s``, ``bare_tok_s``, ``bound_tok_s``, ``ours_over_bare``, ``ours_over_bound``, ``bare_over_bound``).

Run: ``.venv/bin/python bench/real_model.py [--model smollm2]`` (a few minutes with smollm2 on 2 cores; ``--batch 2
--new-tokens 8 --repeats 1`` for a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import record


def matmul_rate(size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of an fp32 ``size``-square matmul (best of ``repeats``)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def prompts(tokenizer: Any, n: int) -> list[list[int]]:
    """``n`` conversation problems as the student asks them, rendered with the model's chat template."""
    from claw_envs.conversation.tasks import TEST_SEEDS, make_problem
    from claw_train.policy.render import render_prompt

    questions = [make_problem(seed, "test")["question"] for seed in TEST_SEEDS[:n]]
    return [render_prompt(tokenizer, [{"role": "user", "content": q + " how do i get this one?"}]) for q in questions]


def bare_generate(
    model: Any, tokenizer: Any, batch: list[list[int]], new: int, temperature: float
) -> tuple[float, int]:
    """Seconds for ``model.generate`` on ``batch`` (left-padded, up to ``new`` tokens each) and the tokens it
    generated (each row up to its end-of-turn token)."""
    import torch

    width = max(map(len, batch))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature, max_new_tokens=new,
            pad_token_id=pad,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    eos = model.generation_config.eos_token_id
    ends = set(eos if isinstance(eos, list) else [eos])
    generated = 0
    for row in out[:, width:].tolist():
        generated += next((i + 1 for i, t in enumerate(row) if t in ends), len(row))
    return seconds, generated


def ours_generate(policy: Any, batch: list[list[int]], new: int, temperature: float) -> tuple[float, list[Any]]:
    """Seconds for claw's policy to answer ``batch`` at once (up to ``new`` tokens each), and the completions."""
    from claw_train.policy.base import SamplingParams

    sampling = SamplingParams(max_new_tokens=new, temperature=temperature, seed=0)

    async def go() -> list[Any]:
        return await asyncio.gather(*(policy.generate(p, sampling) for p in batch))

    start = time.perf_counter()
    done = asyncio.run(go())
    return time.perf_counter() - start, done


def lora_model(path: Path) -> Any:
    from peft import get_peft_model

    from claw_train.options.tree import TrainingConfig
    from claw_train.policy.hf import from_pretrained_merged
    from claw_train.training.options import lora_config

    return get_peft_model(from_pretrained_merged(str(path)), lora_config(TrainingConfig(lora=True)))


def bare_train(path: Path, batch: list[tuple[list[int], list[int]]], lr: float) -> float:
    """Seconds for one forward + backward + AdamW step of the LoRA model on ``batch`` (padded, completion loss)."""
    import torch

    from claw_train.models.tiny_sft import collate

    model = lora_model(path).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    ids, labels, mask, _ = collate([(p + c, len(p)) for p, c in batch], 0)
    start = time.perf_counter()
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def ours_train(path: Path, batch: list[tuple[list[int], list[int]]], lr: float) -> float:
    """Seconds of claw's trainer for one update on ``batch`` (TRL's loss, LoRA), timed from the step's start to
    its end (model loading and trainer set-up excluded)."""
    from transformers import AutoTokenizer, TrainerCallback

    from claw_train.options.tree import TrainingConfig
    from claw_train.policy.hf import from_pretrained_merged
    from claw_train.samples.records import TrainSample, TurnRecord
    from claw_train.training.options import lora_config
    from claw_train.training.trainer import ClawConfig, ClawTrainer, QueueSource

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter())

    source = QueueSource()
    rng = random.Random(0)
    for i, (p, c) in enumerate(batch):
        turn = TurnRecord(
            episode_id=f"e{i}", group_id="g", task_id="t", step_index=1, prompt_ids=p, completion_ids=c,
            logprobs=[-1.0] * len(c), policy_version=0, messages=[], action_text="",
        )  # fmt: skip
        advantages = [rng.choice((-1.0, 1.0))] * len(c)
        source.put(TrainSample(turn=turn, advantages=advantages, method="combined", sample_id=f"s{i}"))
    source.close()
    with tempfile.TemporaryDirectory() as out:
        args = ClawConfig.for_model(
            path, out, max_steps=1, report_to="none", save_strategy="no", samples_per_step=len(batch),
            per_device_train_batch_size=len(batch), learning_rate=lr,
        )  # fmt: skip
        trainer = ClawTrainer(
            from_pretrained_merged(str(path)), args, source=source,
            processing_class=AutoTokenizer.from_pretrained(path), peft_config=lora_config(TrainingConfig(lora=True)),
            callbacks=[Clock()],
        )  # fmt: skip
        trainer.train()
    return times[1] - times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=8, help="prompts generated, and samples trained, at once")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each side (the median is reported)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    record.options(parser, "real-model-throughput")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from claw_train.models.presets import preset
    from claw_train.policy.hf import from_pretrained_merged, load_tokenizer
    from claw_train.policy.inprocess import InProcessPolicy
    from claw_train.policy.loader import resolve_model

    torch.set_num_threads(args.threads)
    path = Path(resolve_model(args.model, progress=True))
    settings = preset(args.model)
    tokenizer = load_tokenizer(str(path))
    batch = prompts(tokenizer, args.batch)
    rate = matmul_rate()
    model = from_pretrained_merged(str(path)).eval()
    params = sum(p.numel() for p in model.parameters())
    new, temperature = args.new_tokens, settings.temperature

    bare_runs = [bare_generate(model, tokenizer, batch, new, temperature) for _ in range(args.repeats)]
    policy = InProcessPolicy(path, max_batch=len(batch), threads=args.threads)
    ours_runs = [ours_generate(policy, batch, new, temperature) for _ in range(args.repeats)]
    policy.close()
    del model
    bare_rate = statistics.median(n / t for t, n in bare_runs)
    ours_rate = statistics.median(sum(len(c.token_ids) for c in done) / t for t, done in ours_runs)

    completions = [list(c.token_ids) for c in ours_runs[0][1]]
    samples = list(zip(batch, completions, strict=True))
    trained = sum(len(p) + len(c) for p, c in samples)
    lr = settings.optimizer["learning_rate"]
    bare_t = statistics.median(bare_train(path, samples, lr) for _ in range(args.repeats))
    ours_t = statistics.median(ours_train(path, samples, lr) for _ in range(args.repeats))

    gen_bound = rate / (2 * params)
    train_bound = rate / (4 * params)
    rows = {
        "generation": {"ours_tok_s": ours_rate, "bare_tok_s": bare_rate, "bound_tok_s": gen_bound},
        "training": {"ours_tok_s": trained / ours_t, "bare_tok_s": trained / bare_t, "bound_tok_s": train_bound},
    }
    for r in rows.values():
        ours, bare, bound = r["ours_tok_s"], r["bare_tok_s"], r["bound_tok_s"]
        r |= {"ours_over_bare": ours / bare, "ours_over_bound": ours / bound, "bare_over_bound": bare / bound}
    print(f"{args.model}: {params / 1e6:.0f}M parameters, {args.threads} threads, matmul {rate / 1e9:.1f} GFLOP/s")
    print(f"batch {len(batch)}: up to {new} new tokens each; training on {trained} tokens (prompts and completions)")
    print(f"{'':>12} {'ours tok/s':>11} {'bare tok/s':>11} {'ours/bare':>10} {'ours/bound':>11} {'bare/bound':>11}")
    for name, r in rows.items():
        print(
            f"{name:>12} {r['ours_tok_s']:11.1f} {r['bare_tok_s']:11.1f} {r['ours_over_bare']:10.2f} "
            f"{r['ours_over_bound']:11.1%} {r['bare_over_bound']:11.1%}"
        )
    report = {
        "model": args.model, "parameters": params, "threads": args.threads, "repeats": args.repeats,
        "temperature": temperature, "matmul_flops": rate, "matmul_gflop_s": rate / 1e9, "batch": len(batch),
        "new_tokens": new, "trained_tokens": trained, **rows,
    }  # fmt: skip
    record.write(args.name, report, folder=args.results)


if __name__ == "__main__":
    main()
