"""``inprocess``: transformers generation on a serving copy of the weights in a background worker.

One worker thread owns the serving model and decodes a running batch (:mod:`claw_train.policy.decode`): a queued
request joins it after its prefill, between two decode steps, while the batch has fewer than ``max_batch`` rows and
its KV cache stays within ``kv_cache_mb``; a finished request leaves it at once. One sampling pass per step records,
for every sampled token, its log-prob under the temperature-scaled distribution (what TRL computes when its
``temperature`` equals the sampler's). ``publish`` loads new weights into a standby copy in the caller's thread;
once a version is staged no request joins, and the worker swaps standby and serving copies when the running batch
has ended, so no request fails or waits for training, and every completion carries the version that produced all of
its tokens.
A weight file that cannot be read, or that does not match the model, raises ``PolicyError`` to the
publisher only; the old weights keep serving. ``stream`` yields each token's text as the worker samples it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import copy
import functools
import inspect
import os
import queue
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from claw_train.policy.base import Completion, Message, Policy, PolicyError, SamplingParams
from claw_train.policy.decode import DecodeBatch, Row, cache_of, kv_bytes_per_token, kv_cache_budget
from claw_train.policy.hf import load_causal_lm, load_into, load_tokenizer, read_weights
from claw_train.policy.render import render_prompt
from claw_train.policy.sampling import check_sampling, row_generator
from claw_train.policy.streaming import OnToken, TextStream, stream_tokens


@dataclass
class _Generate:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    on_token: OnToken | None = None  # called in the worker thread with each sampled token

    def emit(self, token: int) -> None:
        """Hand a sampled token to ``on_token``; a failing callback ends this stream, never the batch."""
        if self.on_token is None:
            return
        try:
            self.on_token(token)
        except Exception:
            self.on_token = None


@dataclass
class _Prefill:
    prompt_ids: list[int]
    completion_ids: list[int]
    temperature: float
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


_STOP = object()
_WAKE = object()


def idle_threads() -> int:
    """The policy worker's threads while no trainer step runs: ``$CLAW_POLICY_THREADS`` if set (claw-train and
    claw-serve set it from a user's ``OMP_NUM_THREADS``), else every core."""
    value = os.environ.get("CLAW_POLICY_THREADS", "")
    return max(1, int(value)) if value.isdigit() else (os.cpu_count() or 1)


class InProcessPolicy(Policy):
    """Serve a local causal LM (a directory or a cached hub id) from a background worker thread.

    ``generate`` and ``logprobs`` are coroutines that any event loop, in any thread, may await.
    ``threads`` is the worker's intra-op thread count on CPU (torch sets it per thread) while a trainer in this
    process is inside an optimizer step (:meth:`set_training`): 1 by default, because oversubscribed cores slow both
    down a lot; the rest of the time (no trainer, or one waiting for samples) the worker uses :func:`idle_threads`.
    ``kv_cache_mb`` caps the running batch's KV cache (every row counted as wide as the widest prompt plus token
    budget; a request alone always runs); None: :func:`kv_cache_budget`. ``continuous=False`` lets no request join a
    running batch until it has ended (what ``bench/real_model.py`` measures continuous batching against).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        device: str = "cpu",
        max_batch: int = 32,
        dtype: Any = None,
        version: int = 0,
        threads: int | None = 1,
        kv_cache_mb: float | None = None,
        continuous: bool = True,
    ):
        import torch

        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if kv_cache_mb is not None and kv_cache_mb <= 0:
            raise ValueError(f"kv_cache_mb must be > 0, got {kv_cache_mb}")
        self.model_path = str(model_path)
        self.device = torch.device(device)
        self.dtype = dtype or torch.float32
        self.max_batch = max_batch
        self.threads = threads if self.device.type == "cpu" else None
        self._training = False
        self.tokenizer = load_tokenizer(self.model_path)
        self._active = load_causal_lm(self.model_path, device=self.device, dtype=self.dtype)
        self._standby: Any = None
        self._serving_version = version
        self._staged_version: int | None = None
        self._published_version = version
        self._stage_lock = threading.Lock()
        self._requests: queue.Queue = queue.Queue()
        self._rng = torch.Generator(device="cpu")
        self._rng.seed()
        self.eos_ids = _eos_ids(self._active, self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.vocab_size = int(self._active.get_input_embeddings().weight.shape[0])
        self.max_positions = int(getattr(self._active.config, "max_position_embeddings", 1 << 30))
        self.continuous = continuous
        self.kv_bytes = kv_bytes_per_token(self._active)
        self.kv_budget = int(kv_cache_mb * 2**20) if kv_cache_mb else kv_cache_budget()
        forward_params = inspect.signature(self._active.forward).parameters
        self._cache_arg = "cache" if "cache" in forward_params else "past_key_values"
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name="claw-inprocess-policy", daemon=True)
        self._worker.start()

    # -- the Policy interface ---------------------------------------------------------------

    @property
    def version(self) -> int:  # type: ignore[override]
        """The version now serving (a published one becomes serving at the next batch boundary)."""
        return self._serving_version

    @property
    def published_version(self) -> int:
        """The newest version handed to :meth:`publish` (serving, or staged for the next batch)."""
        return self._published_version

    async def generate(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        """Complete chat ``messages`` (rendered with the generation prompt) or exact prompt token ids."""
        return await self._submit(self._request(prompt, sampling, tools))

    async def stream(
        self, prompt: Sequence[Message] | Sequence[int], sampling: SamplingParams, *, tools: Any = None
    ) -> AsyncIterator[str | Completion]:
        """:meth:`generate`, yielding each token's text as the worker samples it, then the :class:`Completion`."""
        text = TextStream(self.tokenizer, self.eos_ids)
        make = functools.partial(self._request, prompt, sampling, tools)
        async for item in stream_tokens(make, self._enqueue, text):
            yield item

    def _request(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        tools: Any,
        on_token: OnToken | None = None,
    ) -> _Generate:
        ids = self.prompt_ids(prompt, tools=tools)
        check_sampling(sampling)
        self._check_ids(ids, "prompt")
        if len(ids) >= self.max_positions:
            raise PolicyError(
                f"prompt has {len(ids)} tokens; the model's context is {self.max_positions}: shorten the chat (fewer "
                "turns, --max-turns) or use a model with a longer context"
            )
        return _Generate(ids, sampling, on_token=on_token)

    async def logprobs(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], *, temperature: float = 1.0
    ) -> list[float]:
        """Per-token log-probs of ``completion_ids`` after ``prompt_ids`` under the serving weights (a prefill)."""
        prompt, completion = [int(t) for t in prompt_ids], [int(t) for t in completion_ids]
        if not prompt:
            raise PolicyError("logprobs needs at least one prompt token")
        self._check_ids(prompt + completion, "prefill")
        if temperature <= 0:
            raise PolicyError(f"temperature must be > 0 for log-probs, got {temperature}")
        if not completion:
            return []
        return await self._submit(_Prefill(prompt, completion, float(temperature)))

    def publish(self, weights: Any, version: int) -> None:
        """Stage ``weights`` (a state dict, a model directory or a weight file) as ``version``.

        Loads and checks them in the caller's thread, then the worker swaps them in before its next
        batch. On any failure raises :class:`PolicyError` and the serving weights stay as they are.
        """
        if self._closed:
            raise PolicyError("policy is closed")
        state = read_weights(weights)
        with self._stage_lock:
            if version < self._published_version:
                raise PolicyError(f"version {version} is older than the published version {self._published_version}")
            if self._standby is None:
                self._standby = copy.deepcopy(self._active)
            load_into(self._standby, state)
            self._staged_version = version
            self._published_version = version
        self._requests.put(_WAKE)

    def set_training(self, active: bool) -> None:
        """A training step started or ended: from the next batch on, the worker computes with ``threads`` threads
        during one, with every core otherwise."""
        self._training = active

    def worker_threads(self) -> int | None:
        """The intra-op threads the worker's next batch uses (None: not a CPU model, torch decides)."""
        if self.threads is None:
            return None
        return self.threads if self._training else max(self.threads, idle_threads())

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> None:
        """Stop the worker; queued requests fail with ``PolicyError``."""
        if self._closed:
            return
        self._closed = True
        self._requests.put(_STOP)
        self._worker.join(timeout=60)

    # -- helpers callers use ----------------------------------------------------------------

    def prompt_ids(
        self, prompt: Sequence[Message] | Sequence[int], *, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """Token ids for ``prompt``: exact ids as given, or chat messages rendered with the generation prompt."""
        return render_prompt(self.tokenizer, prompt, tools=tools)

    # -- worker -----------------------------------------------------------------------------

    async def _submit(self, request: _Generate | _Prefill) -> Any:
        self._enqueue(request)
        return await asyncio.wrap_future(request.future)

    def _enqueue(self, request: _Generate | _Prefill) -> None:
        if self._closed or not self._worker.is_alive():
            raise PolicyError("policy is closed")
        self._requests.put(request)

    def _check_ids(self, ids: Sequence[int], what: str) -> None:
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise PolicyError(f"{what} token ids outside the vocabulary (0..{self.vocab_size - 1}): {bad[:5]}")

    def _serve(self) -> None:
        import torch

        running, waiting = DecodeBatch(), collections.deque()
        current = None
        while True:
            prefills: list[_Prefill] = []
            if self._take(waiting, prefills, block=not running and not waiting):
                break
            if not running:
                self._swap_if_staged()
            if (want := self.worker_threads()) and want != current:
                torch.set_num_threads(want)  # per thread: a trainer thread keeps its own setting
                current = want
            joining: list[Row] = []
            try:
                with torch.inference_mode():
                    for req, lps in zip(prefills, self._prefill(prefills) if prefills else [], strict=True):
                        req.future.set_result(lps)
                    joining = self._admit(running, waiting)
                    if running:
                        self._step(running)
            except Exception as err:  # one bad batch must not kill serving
                failed = PolicyError(f"generation failed: {type(err).__name__}: {err}")
                for req in [*prefills, *(r.request for r in [*running.rows, *joining])]:
                    if not req.future.done():
                        req.future.set_exception(failed)
                running = DecodeBatch()
        for row in running.rows:
            row.request.future.set_exception(PolicyError("policy is closed"))
        for req in waiting:
            req.future.set_exception(PolicyError("policy is closed"))
        self._fail_pending()

    def _take(self, waiting: collections.deque, prefills: list[_Prefill], *, block: bool) -> bool:
        """Move every queued request to ``waiting`` (generations) or ``prefills``, waiting for one if ``block``;
        True when the policy is closing."""
        while True:
            try:
                item = self._requests.get() if block else self._requests.get_nowait()
            except queue.Empty:
                return False
            block = False
            if item is _STOP:
                return True
            if item is not _WAKE and item.future.set_running_or_notify_cancel():
                (prefills if isinstance(item, _Prefill) else waiting).append(item)

    def _admit(self, running: DecodeBatch, waiting: collections.deque) -> list[Row]:
        """Prefill waiting requests into ``running`` while it has room (``max_batch`` rows, the KV-cache budget);
        none while a published version waits for the batch to end (a reply is written by one version)."""
        joining: list[Row] = []
        if running and (self._staged_version is not None or not self.continuous or not running.can_join()):
            return joining
        footprint = max((r.footprint for r in running.rows), default=0)
        while waiting and len(running) + len(joining) < self.max_batch:
            req = waiting[0]
            budget = min(req.sampling.max_new_tokens, self.max_positions - len(req.prompt_ids))
            if budget <= 0:
                waiting.popleft()
                req.future.set_result(self._completion(Row(req, 0, None, self._serving_version)))
                continue
            row = Row(req, budget, row_generator(req.sampling.seed, self._rng), self._serving_version)
            wider = max(footprint, row.footprint)
            if (running or joining) and (len(running) + len(joining) + 1) * wider * self.kv_bytes > self.kv_budget:
                break
            footprint = wider
            joining.append(row)
            waiting.popleft()
        if joining:
            logits, (cache, mask, last) = self._forward([r.request.prompt_ids for r in joining], keep=1)
            running.join(joining, logits[:, -1], cache, mask, last)
        return joining

    def _step(self, running: DecodeBatch) -> None:
        """Sample every running row's next token, hand back the rows that ended, advance the rest one token."""
        ended = running.sample(self._row_stops, set(self.eos_ids))
        for row in ended:
            row.request.future.set_result(self._completion(row))
        running.leave(ended)
        if running:
            running.advance(self._active, self._cache_arg, self.device)

    def _row_stops(self, row: Row) -> bool:
        stops = row.request.sampling.stop
        return bool(stops) and self._hits_stop(row.token_ids, stops)

    def _completion(self, row: Row) -> Completion:
        return Completion(
            text=self._text(row.token_ids),
            token_ids=row.token_ids,
            logprobs=row.logprobs,
            finish_reason=row.finish,
            policy_version=row.version,
            prompt_ids=list(row.request.prompt_ids),
        )

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return
            if item not in (_STOP, _WAKE) and item.future.set_running_or_notify_cancel():
                item.future.set_exception(PolicyError("policy is closed"))

    def _swap_if_staged(self) -> None:
        if self._staged_version is None or not self._stage_lock.acquire(blocking=False):
            return
        try:
            if self._staged_version is not None:
                self._active, self._standby = self._standby, self._active
                self._serving_version = self._staged_version
                self._staged_version = None
        finally:
            self._stage_lock.release()

    def _forward(self, seqs: list[list[int]], keep: int) -> tuple[Any, Any]:
        """Left-padded forward pass over ``seqs``; returns logits of the last ``keep`` positions and the cache.

        Identical sequences (a group's members asking the same first prompt) are computed once and their rows copied.
        """
        import torch

        rows: dict[tuple[int, ...], int] = {}
        index = [rows.setdefault(tuple(s), len(rows)) for s in seqs]
        if len(rows) < len(seqs):
            logits, (cache, mask, last) = self._forward([list(s) for s in rows], keep)
            at = torch.tensor(index, device=logits.device)
            cache.reorder_cache(at)
            return logits.index_select(0, at), (cache, mask.index_select(0, at), last.index_select(0, at))
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self._active(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=keep
        )
        return out.logits.float(), (cache_of(out), mask, positions[:, -1])

    def _prefill(self, reqs: list[_Prefill]) -> list[list[float]]:
        import torch

        keep = max(len(r.completion_ids) for r in reqs) + 1
        logits, _ = self._forward([r.prompt_ids + r.completion_ids for r in reqs], keep)
        results = []
        for row, r in enumerate(reqs):
            n = len(r.completion_ids)
            # logits at position t predict token t+1: the n completion tokens are predicted by the n positions
            # before the last one (sequences are right-aligned by left padding).
            scores = logits[row, keep - 1 - n : keep - 1] / r.temperature
            target = torch.tensor(r.completion_ids, device=scores.device)
            lps = torch.log_softmax(scores, dim=-1).gather(-1, target[:, None]).squeeze(-1)
            results.append(lps.tolist())
        return results

    def _text(self, ids: list[int]) -> str:
        body = ids[:-1] if ids and ids[-1] in self.eos_ids else ids
        return self.tokenizer.decode(body, skip_special_tokens=False)

    def _hits_stop(self, ids: list[int], stops: Sequence[str]) -> bool:
        tail = self.tokenizer.decode(ids[-64:], skip_special_tokens=False)
        return any(s and s in tail for s in stops)


# -- loading ---------------------------------------------------------------------------------


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if not ids:
        raise PolicyError("the model has no end-of-sequence token")
    return ids
