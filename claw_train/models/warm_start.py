"""A LoRA warm start: a pretrained model's short supervised run on a family's demonstrations before it acts there.

A small instruction model may not write a family's action format at all (SmolLM2-135M explains an SWE issue in prose
and answers a GUI task with a Python script: no action is ever carried out, so RL has nothing to learn from). A family
whose spec sets ``warm_start_steps`` gets, for a named model (``smollm2``), that many AdamW steps of LoRA on its
``demonstrations()`` (completion tokens only), merged into the weights and saved as a plain model folder beside the
named model (``<model>-warm-<family>-<hash>``, cached; the hash covers the settings and the code that makes the
demonstrations). ``--warm-start 0`` keeps the model as it is.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from claw_train.models.cache import cached_build
from claw_train.models.digest_memo import demonstration_makers
from claw_train.models.named import cache_root

MARKER = "claw_warm_start.json"


@dataclass(frozen=True)
class WarmStartSettings:
    """LoRA SFT on a family's demonstrations: ``steps`` AdamW steps of ``batch_size`` rows."""

    steps: int = 24
    batch_size: int = 4
    lr: float = 1e-3
    warmup: int = 4
    rank: int = 16
    alpha: int = 32
    max_length: int = 1536
    seed: int = 0


def warm_started(
    base: str | Path,
    family: str,
    *,
    steps: int | None = None,
    progress: bool = True,
    say: Callable[[str], None] = print,
) -> Path:
    """The folder of ``base`` after the warm start on ``family`` (built on first use, cached after).

    ``steps`` overrides the family's ``warm_start_steps``; the caller decides whether one is wanted (0: it is not)."""
    import claw_envs

    spec = claw_envs.family_spec(family)
    settings = replace(WarmStartSettings(), steps=steps if steps is not None else spec.training.warm_start_steps)
    if settings.steps < 1:
        raise ValueError(f"a warm start needs at least 1 step, got {settings.steps}")
    base = Path(base)
    key = _digest({"base": base.name, "env": spec.env_id, "settings": asdict(settings), "src": _source(spec.env_id)})
    name = f"{base.name}-warm-{spec.name}-{key}"
    root = cache_root()
    if not (root / name / MARKER).exists() and progress:
        say(
            f"{spec.name}: first use of this model here: a LoRA warm start on the family's demonstrations "
            f"({settings.steps} steps of {settings.batch_size}; cached after)"
        )
    record = {"base": str(base), "family": spec.name, "settings": asdict(settings)}
    return cached_build(
        root, name, lambda out: _train(base, out, spec.env_id, settings, progress), marker=MARKER, record=record
    )


def _train(base: Path, out: Path, env_id: str, s: WarmStartSettings, progress: bool) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from claw_train.models.tiny import demonstrations
    from claw_train.models.tiny_sft import batches, encode_example, lr_factor, shared_prefix
    from claw_train.runlog.progress import optional_progress

    started = time.monotonic()
    examples = demonstrations(env_id, s.steps * s.batch_size, s.seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    rows = [r for r in (encode_example(tokenizer, ex, s.max_length) for ex in examples) if r is not None]
    if not rows:
        raise ValueError(f"no {env_id} demonstration fits in {s.max_length} tokens")
    torch.manual_seed(s.seed)
    lora = LoraConfig(r=s.rank, lora_alpha=s.alpha, target_modules="all-linear", task_type="CAUSAL_LM")
    peft = get_peft_model(model, lora)
    inner = peft.base_model.model  # the causal LM with LoRA layers in place
    inner.train()
    opt = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=s.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_factor(i, s.warmup, s.steps))
    shared, losses = shared_prefix(rows), []
    rng = random.Random(s.seed)
    with optional_progress(progress, f"warm start on {env_id}", s.steps) as advance:
        for step, batch in zip(range(s.steps), batches(rows, s.batch_size, rng), strict=False):
            opt.zero_grad(set_to_none=True)
            losses.append(_batch_backward(inner, batch, shared))
            torch.nn.utils.clip_grad_norm_(peft.parameters(), 1.0)
            opt.step()
            sched.step()
            advance(f"loss {losses[-1]:.3f}  step {step + 1}")
    merged = peft.merge_and_unload()
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if (base / "generation_config.json").is_file():
        (out / "generation_config.json").write_text((base / "generation_config.json").read_text())
    report = {
        "env_id": env_id,
        "rows": len(rows),
        "distinct_rows": len({tuple(ids) for ids, _ in rows}),
        "seconds": round(time.monotonic() - started, 1),
        "first_loss": round(losses[0], 4),
        "final_loss": round(sum(losses[-4:]) / len(losses[-4:]), 4),
    }
    (out / "warm_start.json").write_text(json.dumps(report, indent=2))


def _batch_backward(model: Any, batch: list[tuple[list[int], int]], shared: int) -> float:
    """Accumulate the gradient of the batch's mean completion cross-entropy; returns that loss.

    Each row's prompt runs without gradient (its key/value cache is a constant, the prefix every row shares once
    per batch), and only the completion, from the prompt's last token on, runs with it: the adapter learns what to
    write in a context, at a fraction of the cost of back-propagating through prompts of ~1,000 tokens."""
    import torch
    from transformers import DynamicCache

    tokens = sum(len(ids) - prompt_len for ids, prompt_len in batch)
    prefix = DynamicCache(config=model.config)
    if shared:
        with torch.no_grad():
            model.model(input_ids=torch.tensor([batch[0][0][:shared]]), cache=prefix, use_cache=True)
    total = 0.0
    for ids, prompt_len in batch:
        cache = copy.deepcopy(prefix)
        with torch.no_grad():
            if prompt_len - 1 > shared:
                model.model(input_ids=torch.tensor([ids[shared : prompt_len - 1]]), cache=cache, use_cache=True)
        positions = torch.arange(prompt_len - 1, len(ids)).unsqueeze(0)
        out = model.model(input_ids=torch.tensor([ids[prompt_len - 1 :]]), position_ids=positions, cache=cache)
        logits = model.lm_head(out.last_hidden_state[0, :-1])
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[prompt_len:]), reduction="sum") / tokens
        loss.backward()
        total += loss.item()
    return total


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _source(env_id: str) -> str:
    """The code that makes the demonstrations and trains on them: the env's package, claw_envs, this module and the
    SFT steps (their bytes, not their paths: a clone in another folder finds the same cache)."""
    files = {*demonstration_makers(env_id), Path(__file__), Path(__file__).with_name("tiny_sft.py")}
    return _digest(sorted(hashlib.sha256(f.read_bytes()).hexdigest() for f in files))
