"""Token sampling of the in-process policy: one token and its log-prob from a row's logits (temperature, top-k,
top-p), per-row seeded generators, and the checks a request's sampling parameters must pass."""

from __future__ import annotations

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


def sample_token(logits: Any, sampling: SamplingParams, generator: Any) -> tuple[int, float]:
    """One token from ``logits`` (1-D) and its log-prob under the temperature-scaled, unfiltered distribution."""
    import torch

    if sampling.temperature <= 0:
        tok = int(torch.argmax(logits))
        return tok, float(torch.log_softmax(logits, dim=-1)[tok])
    scaled = logits / sampling.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    filtered = scaled.clone()
    if 0 < sampling.top_k < filtered.numel():
        kth = torch.topk(filtered, sampling.top_k).values[-1]
        filtered[filtered < kth] = float("-inf")
    if sampling.top_p < 1.0:
        order = torch.argsort(filtered, descending=True)
        probs = torch.softmax(filtered[order], dim=-1)
        cum = torch.cumsum(probs, dim=-1)
        drop = cum - probs >= sampling.top_p  # keep the smallest prefix whose mass reaches top_p
        filtered[order[drop]] = float("-inf")
    probs = torch.softmax(filtered, dim=-1).cpu()
    tok = int(torch.multinomial(probs, 1, generator=generator))
    return tok, float(logp[tok])


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
