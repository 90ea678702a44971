"""The batch TRL's GRPO loss reads, built from claw's :class:`~claw_train.samples.records.TrainSample`s, and its split
into micro-batches of rows of similar length within a token budget (:func:`length_groups`): the loss is not computed
over padding, and an update's memory is bounded by the budget, not by the length of the rows an agent produced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from claw_train.samples.records import TrainSample


def collate(
    samples: Sequence[TrainSample], pad_token_id: int, device: Any = "cpu", *, tokens: int | None = None
) -> dict[str, Any]:
    """TRL's batch: left-padded prompts, right-padded completions, ``(B, T)`` advantages and behaviour log-probs.

    ``tokens``: the completion tokens the loss is normalised by (the whole step's, across ranks); default: these.
    """
    b = len(samples)
    p = max(len(s.turn.prompt_ids) for s in samples)
    t = max(len(s.turn.completion_ids) for s in samples)
    prompt_ids = torch.full((b, p), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p), dtype=torch.long)
    completion_ids = torch.full((b, t), pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros((b, t), dtype=torch.long)
    advantages = torch.zeros((b, t), dtype=torch.float32)
    old_logps = torch.zeros((b, t), dtype=torch.float32)
    for i, s in enumerate(samples):
        pl, cl = len(s.turn.prompt_ids), len(s.turn.completion_ids)
        prompt_ids[i, p - pl :] = torch.tensor(s.turn.prompt_ids, dtype=torch.long)
        prompt_mask[i, p - pl :] = 1
        completion_ids[i, :cl] = torch.tensor(s.turn.completion_ids, dtype=torch.long)
        completion_mask[i, :cl] = 1
        advantages[i, :cl] = torch.tensor(s.advantages, dtype=torch.float32)
        old_logps[i, :cl] = torch.tensor(s.turn.logprobs, dtype=torch.float32)
    batch = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "old_per_token_logps": old_logps,
        "num_items_in_batch": completion_mask.sum() if tokens is None else torch.tensor(tokens),
    }
    return {k: v.to(device) for k, v in batch.items()}


GROUP_SLACK = 0.8
"""A row joins the current group while its length is at least this share of the group's longest row."""


def length_groups(
    batch: dict[str, Any], slack: float = GROUP_SLACK, max_tokens: int | None = None
) -> list[dict[str, Any]]:
    """``batch`` (from :func:`collate`) as groups of rows of similar length (prompt + completion), each cut to its own
    longest prompt and completion: the same rows, tokens and per-row values with less padding. A group also ends
    before its rows times its longest row would pass ``max_tokens`` (a row longer than that is a group of its own).
    TRL's ``dapo`` loss sums over tokens and divides by ``num_items_in_batch`` (kept whole in every group), so the
    groups' losses add up to the batch's. One group when the rows are of similar length and within the budget."""
    prompt_len = batch["prompt_mask"].sum(1)
    completion_len = batch["completion_mask"].sum(1)
    order = torch.argsort(prompt_len + completion_len, descending=True).tolist()
    lengths = (prompt_len + completion_len).tolist()
    groups: list[list[int]] = []
    for row in order:
        if groups and lengths[row] >= slack * lengths[groups[-1][0]] and _fits(groups[-1], lengths, max_tokens):
            groups[-1].append(row)
        else:
            groups.append([row])
    if len(groups) == 1:
        return [batch]
    rows = batch["prompt_ids"].size(0)
    out = []
    for group in groups:
        index = torch.tensor(sorted(group), device=batch["prompt_ids"].device)
        p, t = int(prompt_len[index].max()), int(completion_len[index].max())
        part = {}
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.size(0) != rows:
                part[key] = value  # num_items_in_batch: the whole step's
            elif key.startswith("prompt_"):
                part[key] = value[index, value.size(1) - p :]  # left-padded
            elif value.dim() == 2:
                part[key] = value[index, :t]  # right-padded, one column per completion token
            else:
                part[key] = value[index]
        out.append(part)
    return out


def _fits(group: list[int], lengths: list[int], max_tokens: int | None) -> bool:
    """Whether one more row fits ``group`` (longest row first) within ``max_tokens``."""
    return max_tokens is None or (len(group) + 1) * lengths[group[0]] <= max_tokens


def token_budget(model: Any, *, share: float = 0.25) -> int:
    """Tokens (rows times padded length) one forward and backward of ``model`` may take at once: ``share`` of this
    machine's memory over what a token costs in training (its logits, their log-softmax and gradients, and each
    layer's saved activations, in fp32)."""
    import os

    config = getattr(model, "config", None)
    vocab = int(getattr(config, "vocab_size", 32_000))
    hidden = int(getattr(config, "hidden_size", 1024))
    layers = int(getattr(config, "num_hidden_layers", 24))
    inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    per_token = 4 * (6 * vocab + layers * (12 * hidden + 4 * inner))
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(256, int(share * memory / per_token))
