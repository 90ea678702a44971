"""The in-process policy's running decode batch: requests join it after their prefill and leave it when they end.

Every row is left-padded to the batch's width (its attention mask marks the padding, its position ids count its own
tokens only). A joining group is prefilled on its own; its KV cache is padded on the left to the running batch's
width (or the batch's to its) and concatenated along the batch dimension. A finished row is cut out, and cache
columns no remaining row uses are trimmed. So a decode step only computes rows still generating, and a request
never waits for a batch to finish. A cache that is not a plain transformers ``DynamicCache`` (sliding windows,
recurrent state) cannot be merged: such a batch takes no new rows until it has ended.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from claw_train.policy.sampling import sample_rows


@dataclass
class Row:
    """One request being decoded: what it asked, the weights' version, and what it has sampled so far."""

    request: Any  # the policy's queued request: ``prompt_ids``, ``sampling``, ``emit(token)``, ``future``
    budget: int
    generator: Any
    version: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "length"

    @property
    def footprint(self) -> int:
        """Cache positions this row may need: its prompt and its whole token budget."""
        return len(self.request.prompt_ids) + self.budget

    def stopped(self) -> None:
        """The row ended at an end-of-turn token or a stop string (not at its budget)."""
        self.finish = "stop"


class DecodeBatch:
    """Rows decoding together: their next-token logits, KV cache, attention mask and last positions."""

    def __init__(self) -> None:
        self._empty()

    def _empty(self) -> None:
        self.rows: list[Row] = []
        self.logits: Any = None  # (rows, vocab): the distribution each row samples its next token from
        self.cache: Any = None
        self.mask: Any = None  # (rows, width)
        self.last: Any = None  # (rows,): the position of each row's last token

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def footprint(self) -> int:
        """Cache positions the batch may reach: every row as wide as the widest row's prompt and budget."""
        return len(self.rows) * max((r.footprint for r in self.rows), default=0)

    @property
    def version(self) -> int | None:
        """The version of the weights every row of the batch was prefilled with (None: empty)."""
        return self.rows[0].version if self.rows else None

    def can_join(self) -> bool:
        """Whether rows may join now: an empty batch, or one whose cache this module knows how to merge."""
        return not self.rows or mergeable(self.cache)

    def join(self, rows: list[Row], logits: Any, cache: Any, mask: Any, last: Any) -> None:
        """Add prefilled ``rows`` with their next-token ``logits``, prompt ``cache``, ``mask`` and last positions."""
        import torch

        if not self.rows:
            self.rows, self.logits, self.cache, self.mask, self.last = list(rows), logits, cache, mask, last
            return
        width = max(self.mask.shape[1], mask.shape[1])
        self.cache = _concat(_pad_left(self.cache, width), _pad_left(cache, width))
        self.mask = torch.cat([_pad_mask(self.mask, width), _pad_mask(mask, width)])
        self.rows += rows
        self.logits = torch.cat([self.logits, logits])
        self.last = torch.cat([self.last, last])

    def sample(self, is_stop: Callable[[Row], bool], eos: set[int]) -> list[Row]:
        """Sample each row's next token; return the rows that ended (end of turn, a stop string, their budget)."""
        samplings = [r.request.sampling for r in self.rows]
        tokens, logprobs = sample_rows(self.logits, samplings, [r.generator for r in self.rows])
        ended = []
        for row, token, logprob in zip(self.rows, tokens, logprobs, strict=True):
            row.token_ids.append(token)
            row.logprobs.append(logprob)
            row.request.emit(token)
            if token in eos or is_stop(row):
                row.stopped()
                ended.append(row)
            elif len(row.token_ids) >= row.budget:
                ended.append(row)
        return ended

    def leave(self, ended: Sequence[Row]) -> None:
        """Cut ``ended`` rows out of the batch, and the cache columns no remaining row uses."""
        import torch

        if not ended:
            return
        gone = {id(r) for r in ended}
        keep = [i for i, r in enumerate(self.rows) if id(r) not in gone]
        if not keep:
            self._empty()
            return
        at = torch.tensor(keep, device=self.mask.device)
        self.rows = [self.rows[i] for i in keep]
        self.cache.batch_select_indices(at)
        self.mask, self.last, self.logits = self.mask[at], self.last[at], self.logits[at]
        first = int(self.mask.any(0).int().argmax())  # the first column a remaining row uses
        if first and mergeable(self.cache):
            self.mask = self.mask[:, first:]
            for layer in self.cache.layers:
                _replace(layer, layer.keys[:, :, first:], layer.values[:, :, first:])

    def advance(self, model: Any, cache_arg: str, device: Any) -> None:
        """Run the model one step on each row's last sampled token: the next logits and a cache one column wider."""
        import torch

        step = torch.tensor([r.token_ids[-1] for r in self.rows], dtype=torch.long, device=device)[:, None]
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        self.last = self.last + 1
        out = model(
            input_ids=step, attention_mask=self.mask, position_ids=self.last[:, None], use_cache=True,
            **{cache_arg: self.cache},
        )  # fmt: skip
        self.cache, self.logits = cache_of(out), out.logits[:, -1].float()


def cache_of(out: Any) -> Any:
    """The KV cache of a model output (``cache`` in newer transformers, ``past_key_values`` before)."""
    return out.cache if "cache" in out else out.past_key_values


def mergeable(cache: Any) -> bool:
    """Whether ``cache`` holds plain key and value tensors per layer (``(batch, heads, positions, dim)``)."""
    from transformers import DynamicCache

    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer).__name__ == "DynamicLayer" and getattr(layer, "keys", None) is not None for layer in layers)
    )


def _pad_left(cache: Any, width: int) -> Any:
    import torch.nn.functional as F

    for layer in cache.layers:
        extra = width - layer.keys.shape[2]
        if extra:
            _replace(layer, F.pad(layer.keys, (0, 0, extra, 0)), F.pad(layer.values, (0, 0, extra, 0)))
    return cache


def _pad_mask(mask: Any, width: int) -> Any:
    import torch.nn.functional as F

    return F.pad(mask, (width - mask.shape[1], 0))


def _concat(into: Any, other: Any) -> Any:
    import torch

    for mine, theirs in zip(into.layers, other.layers, strict=True):
        _replace(mine, torch.cat([mine.keys, theirs.keys]), torch.cat([mine.values, theirs.values]))
    return into


def _replace(layer: Any, keys: Any, values: Any) -> None:
    """Give a transformers cache layer new key and value tensors (padded, concatenated or trimmed)."""
    layer.keys, layer.values = keys, values


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of KV cache one position of one row takes (keys and values of every layer); 0 if the config does not
    say (then no cache budget applies)."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    if not layers or not heads:
        return 0
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * layers * kv_heads * head_dim * next(model.parameters()).element_size()


def kv_cache_budget(share: float = 0.125) -> int:
    """The in-process policy's default KV-cache budget in bytes: ``share`` of this machine's memory."""
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return int(pages * size * share)
