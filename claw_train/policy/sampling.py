"""Token sampling of the in-process policy: a token and its log-prob for every row of a batch at once (temperature,
top-k, top-p per row), per-row seeded generators, and the checks a request's sampling parameters must pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from claw_train.policy.base import PolicyError, SamplingParams


def row_generator(seed: int | None, shared: Any) -> Any:
    """A generator seeded with ``seed`` for one row, or ``shared`` when the request gives no seed."""
    import torch

    if seed is None:
        return shared
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def sample_rows(
    logits: Any, samplings: Sequence[SamplingParams], generators: Sequence[Any]
) -> tuple[list[int], list[float]]:
    """A token for each row of ``logits`` (``(n, vocab)``) and its log-prob under the row's temperature-scaled,
    unfiltered distribution; a temperature of 0 takes the most likely token (its log-prob unscaled).

    One pass over the batch: top-k and top-p filter each row by its own values, and each row draws one uniform
    number from its own generator and inverts its distribution's cumulative sum (so a seeded row samples the same
    tokens whatever rows share its batch).
    """
    import torch

    vocab = logits.shape[-1]
    temps = torch.tensor([s.temperature if s.temperature > 0 else 1.0 for s in samplings], device=logits.device)
    scaled = logits / temps[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    filtered = scaled
    ks = [s.top_k if 0 < s.top_k < vocab else 0 for s in samplings]
    if any(ks):
        filtered = filtered.clone()
        kth = torch.topk(filtered, max(ks), dim=-1).values
        for row, k in enumerate(ks):
            if k:
                filtered[row][filtered[row] < kth[row, k - 1]] = float("-inf")
    tops = torch.tensor([s.top_p for s in samplings], device=logits.device)
    if bool((tops < 1.0).any()):
        ordered, order = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        drop = (probs.cumsum(-1) - probs) >= tops[:, None]  # keep the smallest prefix whose mass reaches top_p
        filtered = filtered.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    cdf = torch.softmax(filtered, dim=-1).double().cumsum(-1)
    draws = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators]).to(cdf.device)
    tokens = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True).squeeze(-1).clamp(max=vocab - 1)
    greedy = torch.tensor([s.temperature <= 0 for s in samplings], device=logits.device)
    if bool(greedy.any()):
        tokens = torch.where(greedy, logits.argmax(-1), tokens)
    picked = logp.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens.tolist(), picked.tolist()


def check_sampling(s: SamplingParams) -> None:
    """A :class:`PolicyError` naming the first sampling parameter out of range."""
    if s.max_new_tokens < 0:
        raise PolicyError(f"max_new_tokens must be >= 0, got {s.max_new_tokens}")
    if s.temperature < 0:
        raise PolicyError(f"temperature must be >= 0, got {s.temperature}")
    if not 0 < s.top_p <= 1:
        raise PolicyError(f"top_p must be in (0, 1], got {s.top_p}")
    if s.top_k < 0:
        raise PolicyError(f"top_k must be >= 0 (0 = off), got {s.top_k}")
