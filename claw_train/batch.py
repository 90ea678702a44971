"""The batch TRL's GRPO loss reads, built from claw's :class:`~claw_train.records.TrainSample`s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from claw_train.records import TrainSample


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
