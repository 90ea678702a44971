"""Hugging Face model I/O: load a causal LM and its tokenizer (from a hub id, a local folder, or a LoRA checkpoint
folder that names its base model) with clear ``PolicyError`` messages, and read published weights (a state dict or a
folder of safetensors) into a model."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claw_train.policy.base import PolicyError


def local_path(model_path: str) -> Path | None:
    """The local path ``model_path`` names, or None when it reads as a hub id (``org/name``)."""
    path = Path(model_path).expanduser()
    if path.exists():
        return path
    if model_path.startswith((".", "/", "~")) or model_path.count("/") != 1:
        raise PolicyError(f"model path {model_path!r} does not exist (a hub id reads 'org/name')")
    return None


def hub_unreachable(model_id: str, err: BaseException) -> str:
    """What to do when a hub id cannot be fetched (no network, offline mode, unknown id)."""
    reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    offline = " (HF_HUB_OFFLINE is set)" if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True") else ""
    return (
        f"cannot fetch {model_id!r} from the Hugging Face hub{offline}: {reason}. Where the hub is reachable, "
        f"save it once (huggingface-cli download {model_id} --local-dir DIR) and pass --model DIR"
    )


def check_cached_offline(model_id: str) -> None:
    """With the hub off (``HF_HUB_OFFLINE``), a :class:`PolicyError` saying what to do when ``model_id`` is not in the
    local Hugging Face cache (said before torch is imported; the loader would find the same)."""
    if os.environ.get("HF_HUB_OFFLINE") not in ("1", "true", "True"):
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        raise PolicyError(hub_unreachable(model_id, LookupError("it is not in the local Hugging Face cache")))


ADAPTER_CONFIG = "adapter_config.json"


def adapter_base(model_path: str) -> str | None:
    """The base model of a LoRA checkpoint folder (an adapter with no ``config.json`` of its own), else ``None``.

    A base that was a named model's cached conversion is converted again when its folder has gone.
    """
    path = Path(model_path).expanduser()
    if not (path / ADAPTER_CONFIG).is_file() or (path / "config.json").is_file():
        return None
    try:
        base = json.loads((path / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    except (ValueError, KeyError, TypeError) as err:
        raise PolicyError(f"{model_path!r}: {ADAPTER_CONFIG} names no base model ({err})") from err
    if not isinstance(base, str) or not base:
        raise PolicyError(f"{model_path!r}: {ADAPTER_CONFIG} names no base model")
    if not Path(base).expanduser().exists():
        from claw_train.models.named import NAMED, fetch_named

        for named in NAMED.values():
            if Path(base).name == f"{named.name}-{named.sha256[:12]}":
                return str(fetch_named(named.name, progress=False))
    return base


def _check_causal_lm(model_path: str) -> None:
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    base = adapter_base(model_path)
    if base is not None:
        try:
            _check_causal_lm(base)
        except PolicyError as err:
            raise PolicyError(f"the LoRA checkpoint {model_path!r} cannot be rebuilt on its base model: {err}") from err
        return
    path = local_path(model_path)
    if path is not None:
        if not path.is_dir():
            raise PolicyError(f"model path {model_path!r} is a file; give the model's directory")
        if not (path / "config.json").is_file():
            raise PolicyError(f"{model_path!r} is not a Hugging Face model directory (no config.json)")
        try:
            json.loads((path / "config.json").read_text())
        except ValueError as err:
            raise PolicyError(f"{model_path!r}: config.json is not valid JSON ({err})") from err
    try:
        config = AutoConfig.from_pretrained(model_path)
    except Exception as err:
        if path is None:
            raise PolicyError(hub_unreachable(model_path, err)) from err
        raise PolicyError(f"cannot read the model config of {model_path!r}: {err}") from err
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PolicyError(f"{model_path!r} is a {config.model_type!r} model, not a causal language model")


def load_causal_lm(model_path: str, *, device: Any = "cpu", dtype: Any = None) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` with clear ``PolicyError`` messages; eval mode on ``device``.

    A LoRA checkpoint folder loads its base model and merges the adapter in."""
    _check_causal_lm(model_path)
    try:
        model = from_pretrained_merged(model_path, dtype=dtype)
    except Exception as err:
        raise PolicyError(f"cannot load the causal LM at {model_path!r}: {type(err).__name__}: {err}") from err
    return model.to(device).eval()


def from_pretrained_merged(model_path: str, *, dtype: Any = None) -> Any:
    """``AutoModelForCausalLM.from_pretrained``; for a LoRA checkpoint, its base with the adapter merged in."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    if not sys.stderr.isatty():  # its "Loading weights" bar is noise in a pipe or a log file
        hf_logging.disable_progress_bar()
    base = adapter_base(model_path)
    model = AutoModelForCausalLM.from_pretrained(base or model_path, dtype=dtype)
    if base is None:
        return model
    from peft import PeftModel

    merged = PeftModel.from_pretrained(model, model_path).merge_and_unload()
    return merged.requires_grad_(True)  # PEFT froze the base for inference; a full fine-tune trains it all


def load_tokenizer(model_path: str) -> Any:
    """``AutoTokenizer.from_pretrained`` with a clear ``PolicyError`` (chat messages also need a chat template)."""
    from transformers import AutoTokenizer

    _check_causal_lm(model_path)
    try:
        tok = AutoTokenizer.from_pretrained(model_path)
    except Exception as err:
        raise PolicyError(f"cannot load the tokenizer of {model_path!r}: {type(err).__name__}: {err}") from err
    return tok


def read_weights(weights: Any) -> dict[str, Any]:
    """A state dict from a mapping of tensors, a model directory, or a ``.safetensors`` / ``.bin`` / ``.pt`` file."""
    import torch

    if isinstance(weights, Mapping):
        state = dict(weights)
    elif isinstance(weights, str | os.PathLike):
        state = _read_weight_path(Path(weights))
    else:
        raise PolicyError(f"weights must be a state dict or a path, not {type(weights).__name__}")
    if not state:
        raise PolicyError("weights are empty")
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise PolicyError(f"weight {name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise PolicyError(f"weight {name!r} has NaN or infinite values")
    return state


def _read_weight_path(path: Path) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    if not path.exists():
        raise PolicyError(f"weight path {str(path)!r} does not exist")
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise PolicyError(f"no *.safetensors or pytorch_model*.bin weights in {str(path)!r}")
    state: dict[str, Any] = {}
    for f in files:
        try:
            if f.suffix == ".safetensors":
                state.update(load_file(str(f)))
            else:
                state.update(torch.load(f, map_location="cpu", weights_only=True))
        except Exception as err:
            raise PolicyError(f"cannot read weights from {str(f)!r} (truncated or corrupt?): {err}") from err
    return state


def load_into(model: Any, state: Mapping[str, Any]) -> None:
    """Copy ``state`` into ``model`` after checking names and shapes; tied weights may be left out."""
    current = model.state_dict()
    unknown = sorted(set(state) - set(current))
    if unknown:
        raise PolicyError(f"weights have {len(unknown)} names the model does not: {unknown[:5]}")
    storage: dict[int, set[str]] = {}
    for name, tensor in current.items():
        storage.setdefault(tensor.data_ptr(), set()).add(name)
    missing = sorted(n for n in current if n not in state and not (storage[current[n].data_ptr()] & set(state)))
    if missing:
        raise PolicyError(f"weights lack {len(missing)} of the model's tensors: {missing[:5]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(current[name].shape):
            raise PolicyError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the model {tuple(current[name].shape)}"
            )
    import torch

    with torch.no_grad():
        for name, tensor in state.items():
            current[name].copy_(tensor)
