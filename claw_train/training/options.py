"""claw's run options as the trainer's configs: :func:`grpo_config` (a
:class:`~claw_train.training.trainer.ClawConfig`), the ``--trainer`` extras and PEFT's ``LoraConfig``."""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

from claw_train.options import yaml_text
from claw_train.options.tree import ConfigError, TrainingConfig, unknown_option
from claw_train.training.distributed import world_size
from claw_train.training.trainer import ClawConfig


def grpo_config(training: TrainingConfig, *, model: str, output_dir: Path, seed: int, temperature: float) -> Any:
    """The trainer's :class:`~claw_train.training.trainer.ClawConfig` (a ``GRPOConfig``): the model's preset, then these
    options, then ``--trainer`` extras. TensorBoard writes to ``<output_dir>/tensorboard``."""
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(output_dir / "tensorboard")
    values: dict[str, Any] = {
        "max_staleness": training.max_staleness,
        "samples_per_step": training.samples_per_step,
        "micro_batch_tokens": training.micro_batch_tokens,
        "per_device_train_batch_size": training.samples_per_step // world_size(),
        "temperature": temperature,
        "max_steps": training.updates,
        "save_steps": training.checkpoint_every,
        "report_to": training.report_to,
        "seed": seed,
    }
    if training.lr is not None:
        values["learning_rate"] = training.lr
    values |= trainer_extras(training)
    try:
        return ClawConfig.for_model(model, output_dir / "checkpoints", **values)
    except TypeError as err:
        raise ConfigError(f"--trainer: {err}") from None


def trainer_extras(training: TrainingConfig) -> dict[str, Any]:
    """The ``--trainer`` KEY VALUE pairs as :class:`ClawConfig` types them; an unknown name or a value of the wrong
    type is a :class:`ConfigError` (the CLI checks them before any model loads)."""
    extras = yaml_text.option_values(training.trainer)
    fields = typing.get_type_hints(ClawConfig)
    if unknown := [name for name in extras if name not in fields]:
        raise ConfigError(f"--trainer: {unknown_option(unknown[0], fields, otherwise=' (any GRPOConfig field)')}")
    try:
        return yaml_text.coerce_fields(extras, ClawConfig)
    except ValueError as err:
        raise ConfigError(f"--trainer {err}") from None


def check_lora_targets(model: Any, training: TrainingConfig) -> None:
    """A :class:`ConfigError` naming ``--lora-targets`` names that no linear layer of ``model`` has (PEFT would ignore
    a misspelt one beside a right one, or fail deep in the trainer), with the names it has."""
    if not training.lora or training.lora_targets == "all-linear":
        return
    import torch

    linear = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    wanted = [t.strip() for t in training.lora_targets.split(",") if t.strip()]
    if unknown := [t for t in wanted if t not in linear]:
        raise ConfigError(
            f"--lora-targets: this model has no linear layer named {', '.join(unknown)}; its linear layers are "
            f"{', '.join(sorted(linear))} (or give --lora-targets all-linear)"
        )


def lora_config(training: TrainingConfig) -> Any:
    """PEFT's ``LoraConfig`` for ``--lora`` (None without it)."""
    if not training.lora:
        return None
    from peft import LoraConfig

    targets: str | list[str] = training.lora_targets
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    return LoraConfig(
        r=training.lora_rank,
        lora_alpha=training.lora_alpha,
        lora_dropout=0.0,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
