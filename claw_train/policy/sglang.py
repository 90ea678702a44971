"""``sglang``: an HTTP client for one or more SGLang servers' native API (no ``import sglang``).

Requests go round-robin over the servers and move on to the next one when a server cannot be
reached. Prompts are token ids (the chat template is applied here, with the model's own tokenizer),
and ``/generate`` is asked for ``return_logprob`` so every completion keeps its exact token ids and
log-probs. SGLang reports sampled-token log-probs after temperature scaling (unless the server runs
with ``SGLANG_RETURN_ORIGINAL_LOGPROB``), which is what the trainer needs; prompt-token scoring
(:meth:`SGLangPolicy.logprobs`) is at temperature 1.

Weight updates: ``publish(path, version)`` calls ``/update_weights_from_disk`` with
``weight_version`` on every server; ``publish(state_dict, version)`` either writes a safetensors file
under ``publish_dir`` (servers on the same filesystem) or, with a ``broadcaster``, announces the
tensors with ``/update_weights_from_distributed`` while the broadcaster sends them over the NCCL group
set up by :meth:`SGLangPolicy.init_weights_update_group`. Field names follow SGLang's
``io_struct.py`` (``GenerateReqInput``, ``UpdateWeightFromDiskReqInput``,
``InitWeightsUpdateGroupReqInput``, ``UpdateWeightsFromDistributedReqInput``). A real server needs
CUDA; this project's tests speak the same protocol to a local stand-in.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from claw_train.policy.base import Completion, Message, Policy, PolicyError, SamplingParams
from claw_train.policy.http import Servers, field

DEFAULT_GROUP = "weight_update_group"


class SGLangPolicy(Policy):
    """A policy served by SGLang at ``urls`` (``http://host:port``); ``tokenizer_path``: the model's dir or id."""

    def __init__(
        self,
        urls: Sequence[str],
        tokenizer_path: str | os.PathLike[str],
        *,
        timeout: float = 600.0,
        retries: int = 3,
        backoff: float = 0.25,
        api_key: str | None = None,
        publish_dir: str | os.PathLike[str] | None = None,
        broadcaster: Callable[[Mapping[str, Any]], None] | None = None,
        version: int = 0,
    ):
        from claw_train.policy.hf import load_tokenizer

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.servers = Servers(urls, timeout=timeout, retries=retries, backoff=backoff, headers=headers)
        self.tokenizer = load_tokenizer(str(tokenizer_path))
        self.tokenizer_path = str(tokenizer_path)
        self.publish_dir = Path(publish_dir) if publish_dir else None
        self.broadcaster = broadcaster
        self.version = version
        self.group_name: str | None = None
        eos = self.tokenizer.eos_token_id
        self.eos_ids = [eos] if eos is not None else []

    @property
    def urls(self) -> list[str]:
        """The servers' base URLs, in round-robin order."""
        return list(self.servers.urls)

    # -- generation -------------------------------------------------------------------------

    async def generate(
        self,
        prompt: Sequence[Message] | Sequence[int],
        sampling: SamplingParams,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> Completion:
        """``/generate`` with ``input_ids`` and ``return_logprob``; the next server in turn answers."""
        from claw_train.policy.render import render_prompt

        ids = render_prompt(self.tokenizer, prompt, tools=tools)
        payload = {"input_ids": ids, "sampling_params": sampling_params(sampling), "return_logprob": True}
        data = await self.servers.request("POST", "/generate", payload)
        return self._completion(data, ids)

    def _completion(self, data: Any, prompt_ids: list[int]) -> Completion:
        what = "SGLang /generate"
        meta = field(data, "meta_info", what=what)
        entries = field(meta, "output_token_logprobs", what=what)
        try:
            logprobs = [float(e[0]) for e in entries]
            token_ids = [int(e[1]) for e in entries]
        except (TypeError, ValueError, IndexError) as err:
            raise PolicyError(
                f"{what}: output_token_logprobs are not [logprob, token_id, text] triples: {err}"
            ) from err
        output_ids = data.get("output_ids")
        if output_ids is not None and list(output_ids) != token_ids:
            raise PolicyError(f"{what}: output_ids and output_token_logprobs disagree")
        reason = meta.get("finish_reason")
        kind = reason.get("type") if isinstance(reason, Mapping) else reason
        if kind == "abort":
            raise PolicyError(f"{what}: request aborted by the server: {reason}")
        finish = {"stop": "stop", "length": "length"}.get(str(kind), "stop" if kind else "length")
        body = token_ids[:-1] if token_ids and token_ids[-1] in self.eos_ids else token_ids
        return Completion(
            text=self.tokenizer.decode(body, skip_special_tokens=False),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=_as_version(meta.get("weight_version"), self.version),
            prompt_ids=list(prompt_ids),
        )

    async def logprobs(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], *, temperature: float = 1.0
    ) -> list[float]:
        """Prompt-token log-probs of ``completion_ids`` after ``prompt_ids`` (a prefill with ``max_new_tokens`` 0)."""
        prompt, completion = [int(t) for t in prompt_ids], [int(t) for t in completion_ids]
        if temperature != 1.0:
            raise PolicyError("SGLang scores prompt tokens at temperature 1 only; use temperature 1.0 with sglang")
        if not prompt:
            raise PolicyError("logprobs needs at least one prompt token")
        if not completion:
            return []
        payload = {
            "input_ids": prompt + completion,
            "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
            "return_logprob": True,
            "logprob_start_len": len(prompt) - 1,
        }
        data = await self.servers.request("POST", "/generate", payload)
        entries = field(data, "meta_info", "input_token_logprobs", what="SGLang /generate (prefill)")
        tail = entries[-len(completion) :] if len(entries) >= len(completion) else None
        if tail is None or [int(e[1]) for e in tail] != completion or any(e[0] is None for e in tail):
            raise PolicyError("SGLang /generate (prefill): input_token_logprobs do not cover the completion tokens")
        return [float(e[0]) for e in tail]

    # -- server state -----------------------------------------------------------------------

    async def health(self) -> dict[str, bool]:
        """``/health`` of every server: ``{url: up}``."""
        result = {}
        for url in self.servers.urls:
            try:
                await self.servers.request("GET", "/health", url=url)
                result[url] = True
            except PolicyError:
                result[url] = False
        return result

    async def model_info(self, url: str | None = None) -> dict[str, Any]:
        """``/get_model_info`` (``model_path``, ``tokenizer_path``, ``is_generation``, ``weight_version`` …)."""
        info = await self.servers.request("GET", "/get_model_info", url=url)
        if not isinstance(info, Mapping):
            raise PolicyError(f"SGLang /get_model_info: expected an object, got {info!r}")
        return dict(info)

    async def flush_cache(self) -> None:
        """``/flush_cache`` on every server (the prefix cache holds KV computed by old weights)."""
        for url in self.servers.urls:
            await self.servers.request("POST", "/flush_cache", url=url)

    # -- weight updates ---------------------------------------------------------------------

    def publish(self, weights: Any, version: int) -> None:
        """Send new weights to every server as ``version`` (see the module docstring for the paths)."""
        if version < self.version:
            raise PolicyError(f"version {version} is older than the published version {self.version}")
        if isinstance(weights, str | os.PathLike):
            self.update_weights_from_disk(weights, version)
        elif isinstance(weights, Mapping):
            if self.broadcaster is not None:
                self.update_weights_from_distributed(weights, version)
            elif self.publish_dir is not None:
                self.update_weights_from_disk(self._write(weights, version), version)
            else:
                raise PolicyError("publishing a state dict to SGLang needs publish_dir (shared disk) or a broadcaster")
        else:
            raise PolicyError(f"weights must be a state dict or a path, not {type(weights).__name__}")

    def update_weights_from_disk(self, model_path: str | os.PathLike[str], version: int) -> None:
        """``/update_weights_from_disk`` on every server; any failure raises (failed servers keep their old weights)."""
        payload = {"model_path": str(model_path), "weight_version": str(version), "abort_all_requests": False}
        self._everywhere("/update_weights_from_disk", lambda _i: payload)
        self.version = version

    def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        ranks_per_server: int | Sequence[int] = 1,
        group_name: str = DEFAULT_GROUP,
        backend: str = "nccl",
        join: Callable[[int], None] | None = None,
    ) -> int:
        """``/init_weights_update_group`` on every server; the trainer is rank 0 of the group.

        Server ``i`` gets ``rank_offset`` 1 + the ranks of the servers before it (``ranks_per_server``
        is each server's tensor-parallel size). The servers block until every rank joined, so the
        trainer's own join runs in ``join(world_size)`` while the requests are in flight. Returns the
        world size.
        """
        sizes = [ranks_per_server] * len(self.urls) if isinstance(ranks_per_server, int) else list(ranks_per_server)
        if len(sizes) != len(self.urls) or min(sizes) < 1:
            raise PolicyError(f"ranks_per_server needs one positive size per server, got {sizes}")
        world = 1 + sum(sizes)
        offsets = [1 + sum(sizes[:i]) for i in range(len(sizes))]

        def body(i: int) -> dict[str, Any]:
            return {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": offsets[i],
                "world_size": world,
                "group_name": group_name,
                "backend": backend,
            }

        self._everywhere("/init_weights_update_group", body, alongside=(lambda: join(world)) if join else None)
        self.group_name = group_name
        return world

    def update_weights_from_distributed(self, weights: Mapping[str, Any], version: int) -> None:
        """Announce ``weights`` with ``/update_weights_from_distributed`` while ``broadcaster`` sends them."""
        if self.group_name is None or self.broadcaster is None:
            raise PolicyError("call init_weights_update_group and give a broadcaster before distributed updates")
        payload = {
            "names": list(weights),
            "dtypes": [str(t.dtype).removeprefix("torch.") for t in weights.values()],
            "shapes": [list(t.shape) for t in weights.values()],
            "group_name": self.group_name,
            "flush_cache": True,
            "abort_all_requests": False,
            "weight_version": str(version),
        }
        broadcaster = self.broadcaster
        self._everywhere("/update_weights_from_distributed", lambda _i: payload, alongside=lambda: broadcaster(weights))
        self.version = version

    def _write(self, weights: Mapping[str, Any], version: int) -> Path:
        from safetensors.torch import save_file

        assert self.publish_dir is not None
        out = self.publish_dir / f"v{version}"
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "model.safetensors.tmp"
        save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(tmp))
        tmp.replace(out / "model.safetensors")
        return out

    def _everywhere(
        self, path: str, body: Callable[[int], dict[str, Any]], *, alongside: Callable[[], None] | None = None
    ) -> None:
        """POST to every server at once (plus ``alongside`` in this thread); raise if any did not succeed."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.urls)) as pool:
            futures = {
                url: pool.submit(self.servers.request_sync, "POST", path, body(i), url=url)
                for i, url in enumerate(self.urls)
            }
            if alongside is not None:
                alongside()
            failures = []
            for url, fut in futures.items():
                try:
                    reply = fut.result()
                except PolicyError as err:
                    failures.append(str(err))
                    continue
                if isinstance(reply, Mapping) and reply.get("success") is False:
                    failures.append(f"{url}{path}: {reply.get('message', 'no message')}")
        if failures:
            raise PolicyError(f"{path} failed on {len(failures)} of {len(self.urls)} servers: {'; '.join(failures)}")

    async def aclose(self) -> None:
        await self.servers.aclose()


def sampling_params(s: SamplingParams) -> dict[str, Any]:
    """Our ``SamplingParams`` in SGLang's ``sampling_params`` fields (``top_k`` -1 = off, ``sampling_seed``)."""
    params: dict[str, Any] = {
        "max_new_tokens": s.max_new_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k if s.top_k > 0 else -1,
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if s.stop:
        params["stop"] = list(s.stop)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
    return params


def _as_version(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
