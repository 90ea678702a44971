"""The real model's speed on this CPU: this machine's limits, generation and training tokens/s against the bare
operation and the bound that applies, and each lever of the serving path measured on and off in one run.

* **Limits**: the fp32 and bf16 matmul rates (``torch.mm``, all threads) and the memory read bandwidth (a sum over
  512 MB), and whether the CPU computes bf16 natively (AMX or AVX-512 BF16).
* **Generation**: ``--batch`` chat prompts (held-out conversation problems), ``--new-tokens`` each, sampled at the
  preset's temperature. Ours: claw's in-process policy (the running batch the pipeline serves with, which also
  records every token's log-prob). Bare: ``model.generate`` on the same prompts, left-padded into one batch. Its
  bound is the lower of the memory bound (the weights read once per decode step for the whole batch) and the
  FLOP bound (2 FLOPs per parameter per token).
* **Levers**, each on the same prompts: the batch the pipeline keeps in flight (8, ``--concurrency``, 32 rows), the
  serving copy's dtype (float32, bfloat16), a running batch that requests join against one that takes none until it
  ends (``--concurrency`` clients, each asking 3 replies of mixed lengths in turn), the worker's threads (1 against
  all), and the bf16 copy's log-prob gap: every token it sampled re-scored by the float32 model (mean and largest
  gap, and the share of tokens whose ratio leaves the trainer's clip range [0.8, 1.28]).
* **Training**: one optimizer update on ``--batch`` samples of the same lengths. Ours: claw's trainer (TRL's loss,
  LoRA r16 as the preset). Bare: one forward + backward + optimizer step of the same LoRA model on the same padded
  batch, cross-entropy on the completion tokens. Bound: 4 FLOPs per parameter per trained token with LoRA (forward,
  and the backward through activations only: the frozen weights get no gradient) at the fp32 matmul rate.

Each figure is measured in this run, at one thread count for both sides (``--threads``, default: all cores); claw's
generation runs in a child process of its own (:func:`measure_levers` says why).
Prints tables and writes ``bench/results/real-model-throughput.json`` (``--results DIR``, ``--name NAME`` to write
elsewhere): ``model``, ``parameters``, ``threads``, ``repeats``, ``temperature``, ``machine`` (``matmul_gflop_s``,
``matmul_bf16_gflop_s``, ``bandwidth_gb_s``, ``native_bf16``), ``matmul_flops`` and ``matmul_gflop_s`` (fp32),
``batch``, ``new_tokens``, ``concurrency``, ``trained_tokens``, ``generation`` and ``training`` (each
``ours_tok_s``, ``bare_tok_s``, ``bound_tok_s``, ``ours_over_bare``, ``ours_over_bound``, ``bare_over_bound``),
``levers`` (``batch_<rows>_<dtype>``, ``clients_<n>_joining_float32``, ``clients_<n>_batches_to_end_float32``,
``batch_<n>_float32_1_thread``: each ``tok_s``, ``bound_tok_s``, ``over_bare``, ``over_bound``), ``pipeline``
(the chosen path at the pipeline's concurrency: ``path``, ``tok_s``, ``over_bare``, ``over_bound``) and
``bf16_gap``.

Run: ``.venv/bin/python bench/real_model.py [--model smollm2]`` (about five minutes with smollm2 on 2 cores;
``--batch 2 --new-tokens 8 --repeats 1 --concurrency 4`` for a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import record


def matmul_rate(size: int = 1024, repeats: int = 20, dtype: Any = None) -> float:
    """FLOP/s of a ``size``-square matmul in ``dtype`` (fp32 by default; best of ``repeats``)."""
    import torch

    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def bandwidth(mb: int = 512, repeats: int = 5) -> float:
    """Bytes/s read by a sum over an ``mb``-megabyte fp32 tensor (best of ``repeats``): what a decode step that
    reads every weight once can reach."""
    import torch

    data = torch.ones(mb * 2**20 // 4)
    data.sum()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best


def decode_bound(params: int, batch: int, *, rate: float, bytes_s: float, element: int) -> float:
    """Tokens/s of a batch of ``batch`` rows if each decode step only read the weights once (at ``bytes_s``) and
    computed 2 FLOPs per parameter per row (at ``rate``), whichever is slower."""
    step = max(params * element / bytes_s, batch * 2 * params / rate)
    return batch / step


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


def clients(policy: Any, batch: list[list[int]], concurrency: int, temperature: float) -> tuple[float, int]:
    """Seconds for ``concurrency`` clients each asking 3 replies in turn (budgets 96, 16, 48, 32 tokens, cycling),
    as episodes of the pipeline do, and the tokens generated."""
    from claw_train.policy.base import SamplingParams

    budgets = (96, 16, 48, 32)

    async def client(i: int) -> int:
        made = 0
        for turn in range(3):
            new = budgets[(i + turn) % len(budgets)]
            sampling = SamplingParams(max_new_tokens=new, temperature=temperature, seed=i * 10 + turn)
            made += len((await policy.generate(batch[i % len(batch)], sampling)).token_ids)
        return made

    async def go() -> int:
        return sum(await asyncio.gather(*(client(i) for i in range(concurrency))))

    start = time.perf_counter()
    made = asyncio.run(go())
    return time.perf_counter() - start, made


def bf16_gap(fp32: Any, completions: list[Any], temperature: float) -> dict[str, float]:
    """The float32 model's log-probs of tokens the bf16 copy sampled, against the bf16 copy's records."""
    import torch

    async def rescore() -> list[float]:
        gaps: list[float] = []
        for c in completions:
            ref = await fp32.logprobs(c.prompt_ids, c.token_ids, temperature=temperature)
            gaps += [a - b for a, b in zip(ref, c.logprobs, strict=True)]
        return gaps

    gap = torch.tensor(asyncio.run(rescore()))
    ratio = gap.exp()
    return {
        "tokens": gap.numel(), "mean_abs": float(gap.abs().mean()), "max_abs": float(gap.abs().max()),
        "mean": float(gap.mean()), "outside_clip_share": float(((ratio < 0.8) | (ratio > 1.28)).float().mean()),
    }  # fmt: skip


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


def median_rate(repeats: int, run: Callable[[], tuple[float, int]]) -> float:
    """The median tokens/s of ``repeats`` calls of ``run`` (each returns its seconds and tokens)."""
    return statistics.median(n / t for t, n in (run() for _ in range(repeats)))


def measure_levers(
    path: Path, batch: list[list[int]], args: argparse.Namespace, temperature: float
) -> tuple[dict[str, dict[str, Any]], list[list[int]], dict[str, float]]:
    """Each lever's tokens/s, rows and dtype (see the module docstring), the token ids claw's first run at ``--batch``
    rows in float32 generated, and the bf16 copy's log-prob gap at ``--concurrency`` rows.

    Run in a process of its own (:func:`main` spawns one): once a second thread of a process has run torch ops on
    more than one OpenMP thread, libgomp manages more threads than there are cores and stops spinning between ops,
    which slows every op of the serving worker by a quarter here. A claw run never does that (its trainer thread
    computes on one thread); the bench's own matmuls and bare calls in the main thread would.
    """
    import torch

    from claw_train.policy.inprocess import InProcessPolicy

    torch.set_num_threads(args.threads)
    new, many = args.new_tokens, args.concurrency
    levers: dict[str, dict[str, Any]] = {}
    first: list[list[int]] = []
    gap: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        policy = InProcessPolicy(path, threads=args.threads, dtype=dtype)
        ours_generate(policy, batch, 4, temperature)

        def generated(prompts: list[list[int]], runs: list[Any], policy: Any = policy) -> tuple[float, int]:
            runs.append(ours_generate(policy, prompts, new, temperature))
            return runs[-1][0], sum(len(c.token_ids) for c in runs[-1][1])

        def served(policy: Any = policy) -> tuple[float, int]:
            return clients(policy, batch, many, temperature)

        for rows in sorted({len(batch), many, 32}):
            runs: list[Any] = []
            wide = (batch * (rows // len(batch) + 1))[:rows]
            tok_s = median_rate(args.repeats, functools.partial(generated, wide, runs))
            levers[f"batch_{rows}_{name}"] = {"tok_s": tok_s, "rows": rows, "dtype": name}
            if rows == len(batch) and dtype == torch.float32:
                first = [list(c.token_ids) for c in runs[0][1]]
            if rows == many and dtype == torch.bfloat16:
                fp32 = InProcessPolicy(path, threads=args.threads)
                gap = bf16_gap(fp32, runs[0][1], temperature)
                fp32.close()
        if dtype == torch.float32:
            levers[f"clients_{many}_joining_{name}"] = {"tok_s": median_rate(args.repeats, served), "rows": many,
                                                        "dtype": name}  # fmt: skip
            policy.continuous = False
            levers[f"clients_{many}_batches_to_end_{name}"] = {"tok_s": median_rate(args.repeats, served),
                                                               "rows": many, "dtype": name}  # fmt: skip
            policy.continuous = True
            os.environ["CLAW_POLICY_THREADS"], policy.threads = "1", 1
            wide = (batch * many)[:many]
            levers[f"batch_{many}_{name}_1_thread"] = {
                "tok_s": median_rate(args.repeats, functools.partial(generated, wide, [])), "rows": many, "dtype": name,
            }  # fmt: skip
            del os.environ["CLAW_POLICY_THREADS"]
            policy.threads = args.threads
        policy.close()
    return levers, first, gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--batch", type=int, default=8, help="prompts generated, and samples trained, at once")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16, help="requests the pipeline keeps in flight (an "
                        "agent family's default: 4 task groups of 4 episodes)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each side (the median is reported)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    record.options(parser, "real-model-throughput")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from claw_train.models.presets import preset
    from claw_train.policy.hf import from_pretrained_merged, load_tokenizer
    from claw_train.policy.loader import native_bf16, resolve_model

    torch.set_num_threads(args.threads)
    path = Path(resolve_model(args.model, progress=True))
    settings = preset(args.model)
    tokenizer = load_tokenizer(str(path))
    batch = prompts(tokenizer, args.batch)
    rate, rate_bf16, bytes_s = matmul_rate(), matmul_rate(dtype=torch.bfloat16), bandwidth()
    model = from_pretrained_merged(str(path)).eval()
    params = sum(p.numel() for p in model.parameters())
    new, temperature, many = args.new_tokens, settings.temperature, args.concurrency

    def bound(rows: int, dtype: Any = torch.float32) -> float:
        bf16 = dtype == torch.bfloat16
        element = 2 if bf16 else 4
        return decode_bound(params, rows, rate=rate_bf16 if bf16 else rate, bytes_s=bytes_s, element=element)

    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as child:  # see measure_levers
        levers, completions, gap = child.submit(measure_levers, path, batch, args, temperature).result()
    bare_generate(model, tokenizer, batch, 4, temperature)  # warm-up: first-call costs are no one's rate
    bare_rate = median_rate(args.repeats, functools.partial(bare_generate, model, tokenizer, batch, new, temperature))
    del model
    for lever in levers.values():
        top = bound(lever["rows"], getattr(torch, lever["dtype"]))
        lever |= {"bound_tok_s": top, "over_bare": lever["tok_s"] / bare_rate, "over_bound": lever["tok_s"] / top}
    ours_rate = levers[f"batch_{len(batch)}_float32"]["tok_s"]
    chosen = f"clients_{many}_joining_float32"
    pipeline = {"path": chosen, "tok_s": levers[chosen]["tok_s"], "over_bare": levers[chosen]["over_bare"],
                "over_bound": levers[chosen]["over_bound"]}  # fmt: skip

    samples = list(zip(batch, completions, strict=True))
    trained = sum(len(p) + len(c) for p, c in samples)
    lr = settings.optimizer["learning_rate"]
    bare_t = statistics.median(bare_train(path, samples, lr) for _ in range(args.repeats))
    ours_t = statistics.median(ours_train(path, samples, lr) for _ in range(args.repeats))

    rows = {
        "generation": {"ours_tok_s": ours_rate, "bare_tok_s": bare_rate, "bound_tok_s": bound(len(batch))},
        "training": {
            "ours_tok_s": trained / ours_t,
            "bare_tok_s": trained / bare_t,
            "bound_tok_s": rate / (4 * params),
        },
    }
    for r in rows.values():
        ours, bare, top = r["ours_tok_s"], r["bare_tok_s"], r["bound_tok_s"]
        r |= {"ours_over_bare": ours / bare, "ours_over_bound": ours / top, "bare_over_bound": bare / top}
    machine = {"matmul_gflop_s": rate / 1e9, "matmul_bf16_gflop_s": rate_bf16 / 1e9, "bandwidth_gb_s": bytes_s / 1e9,
               "native_bf16": native_bf16()}  # fmt: skip
    print(
        f"{args.model}: {params / 1e6:.0f}M parameters, {args.threads} threads; matmul {rate / 1e9:.1f} GFLOP/s fp32, "
        f"{rate_bf16 / 1e9:.1f} bf16 (native bf16: {machine['native_bf16']}); memory read {bytes_s / 1e9:.1f} GB/s"
    )
    print(f"batch {len(batch)}: up to {new} new tokens each; training on {trained} tokens (prompts and completions)")
    print(f"{'':>12} {'ours tok/s':>11} {'bare tok/s':>11} {'ours/bare':>10} {'ours/bound':>11} {'bare/bound':>11}")
    for name, r in rows.items():
        print(
            f"{name:>12} {r['ours_tok_s']:11.1f} {r['bare_tok_s']:11.1f} {r['ours_over_bare']:10.2f} "
            f"{r['ours_over_bound']:11.1%} {r['bare_over_bound']:11.1%}"
        )
    print(f"\nlevers (generation; bare model.generate at batch {len(batch)}: {bare_rate:.1f} tok/s)")
    print(f"{'':>36} {'tok/s':>8} {'x bare':>7} {'of bound':>9}")
    for name, lever in levers.items():
        print(f"{name:>36} {lever['tok_s']:8.1f} {lever['over_bare']:7.2f} {lever['over_bound']:9.1%}")
    print(
        f"bf16 copy's log-probs against float32's, {gap['tokens']} tokens: mean |gap| {gap['mean_abs']:.3f} nats, "
        f"largest {gap['max_abs']:.3f}, {gap['outside_clip_share']:.1%} of tokens outside the clip range"
    )
    report = {
        "model": args.model, "parameters": params, "threads": args.threads, "repeats": args.repeats,
        "temperature": temperature, "machine": machine, "matmul_flops": rate, "matmul_gflop_s": rate / 1e9,
        "batch": len(batch), "new_tokens": new, "concurrency": many, "trained_tokens": trained, **rows,
        "levers": levers, "pipeline": pipeline, "bf16_gap": gap,
    }  # fmt: skip
    record.write(args.name, report, folder=args.results)


if __name__ == "__main__":
    main()
