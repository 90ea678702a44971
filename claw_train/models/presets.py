"""What a model gets by default, by its size: the optimiser, LoRA or not, and the sampling temperatures.

Three presets: ``tiny`` (claw's ~1M-parameter CPU model, and any model as narrow), ``small`` (a real model under
1B parameters, measured on ``smollm2``, SmolLM2-135M) and ``qwen3-4b`` (the paper's, for everything larger).
:func:`claw_train.options.resolve.resolve` fills ``--lr``, ``--lora``, ``--temperature`` and ``--eval-temperature`` from
the model's preset where they are not given, so ``run.json`` records the values a run used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_train.runlog.checkpoints import last_checkpoint


@dataclass(frozen=True)
class Preset:
    """The defaults of one class of model."""

    optimizer: dict[str, Any]
    """``GRPOConfig`` fields (learning rate, weight decay, Adam β2, gradient clipping)."""
    lora: bool
    """Train LoRA adapters rather than every weight."""
    temperature: float
    """Sampling temperature of trained turns."""
    eval_temperature: float = field(default=0.0)
    """Sampling temperature of held-out evaluation with one sample per task (0: greedy, the most likely reply)."""


PRESETS: dict[str, Preset] = {
    # The paper's Qwen3-4B run: lr 1e-5, weight decay 0.1, Adam β2 0.98, rollouts sampled at 0.6.
    "qwen3-4b": Preset({"learning_rate": 1e-5, "weight_decay": 0.1, "adam_beta2": 0.98}, lora=False, temperature=0.6),
    # SmolLM2-135M, LoRA r16, student persona, combined, 4 updates of 4 samples, held-out score (greedy, n=16) from
    # 0.135: lr 1e-4 0.365, 2e-4 0.594, 5e-4 0.500, 1e-3 0.042 (collapsed); the paper's full fine-tune lr 1e-5
    # left a LoRA curve flat (issue #27). Measured runs: bench/results/smollm2-lr-sweep.json.
    "small": Preset(
        {"learning_rate": 2e-4, "weight_decay": 0.0, "adam_beta2": 0.98, "max_grad_norm": 1.0},
        lora=True,
        temperature=0.6,
    ),
    # The ~1M-parameter CPU model (student persona, combined, 16 updates from 0.23): lr 3e-4 reached 0.30,
    # 6e-4 0.48-0.65, 1e-3 0.55 with invalid replies creeping in. Its tables were measured sampling at 1.0,
    # evaluations included (greedy decoding loops on a model this small).
    "tiny": Preset(
        {"learning_rate": 6e-4, "weight_decay": 0.0, "adam_beta2": 0.98, "max_grad_norm": 1.0},
        lora=False,
        temperature=1.0,
        eval_temperature=1.0,
    ),
}

TINY_HIDDEN_SIZE = 512  # models this narrow get the tiny preset
SMALL_PARAMETERS = 1_000_000_000  # models estimated below this many parameters get the small preset
SMALL_NAMED = ("smollm2",)  # named models (claw_train.models.named) of the small class, known before any fetch


def preset_for(model: str | Path) -> str:
    """The preset's name for a model spec: by name (``tiny``, a named model), else by the size its
    ``config.json`` gives (a local folder, a hub id already in the Hugging Face cache, a LoRA checkpoint's base, a
    run folder's last checkpoint); unknown: the paper's."""
    if str(model) == "tiny":
        return "tiny"
    if str(model) in SMALL_NAMED:
        return "small"
    folder = _model_folder(Path(model).expanduser())
    base = _json(folder / "adapter_config.json").get("base_model_name_or_path")
    if base and not (folder / "config.json").is_file():  # a LoRA checkpoint: its base's preset
        named = Path(str(base)).name.split("-")[0]  # a named model's cache folder is <name>-<sha256 prefix>
        return "small" if named in SMALL_NAMED and not Path(str(base)).exists() else preset_for(str(base))
    config = _json(folder / "config.json")
    if not config and "/" in str(model) and not folder.exists():
        config = _json(_cached_hub_config(str(model)) or folder / "config.json")
    hidden = config.get("hidden_size")
    if isinstance(hidden, int) and hidden <= TINY_HIDDEN_SIZE:
        return "tiny"
    size = parameters(config)
    return "small" if size is not None and size < SMALL_PARAMETERS else "qwen3-4b"


def preset(model: str | Path) -> Preset:
    """The :class:`Preset` of ``model`` (see :func:`preset_for`)."""
    return PRESETS[preset_for(model)]


def parameters(config: dict[str, Any]) -> int | None:
    """A decoder's parameter count estimated from its config (embeddings, attention and a gated MLP per layer);
    None when the config lacks the sizes."""
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        inner = int(config.get("intermediate_size") or 4 * hidden)
        vocab = int(config.get("vocab_size") or 0)
    except (KeyError, TypeError, ValueError):
        return None
    return vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inner)


def _model_folder(path: Path) -> Path:
    """A claw-train run folder's last checkpoint, else ``path``."""
    if (path / "run.json").is_file() and (path / "checkpoints").is_dir():
        return last_checkpoint(path / "checkpoints") or path
    return path


def _json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _cached_hub_config(repo: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo, "config.json")
    except ValueError:  # not a valid repo id
        return None
    return Path(found) if isinstance(found, str) else None
