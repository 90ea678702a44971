"""ClawTrainer: TRL's GRPOTrainer fed from a queue of ready samples.

TRL keeps the clipped surrogate (``_compute_loss``: asymmetric clip ε_low/ε_high, ``dapo`` token
normalisation, KL coefficient 0); ClawTrainer replaces *sample production*, and with a :class:`Replay` adds
its weighted supervised loss on demonstrations to TRL's (``--replay``). Each optimizer step
it pulls ``samples_per_step`` ready :class:`~claw_train.samples.records.TrainSample`s from a
:class:`SampleSource`, drops those staler than ``max_staleness`` policy versions, and hands TRL
left-padded prompts, right-padded completions, ``(B, T)`` per-token advantages and the behaviour
log-probs the serving policy recorded (``old_per_token_logps``), so the trainer/behaviour ratio
corrects for the versions in between. After every optimizer step a :class:`WeightPublisher`
callback hands the new weights to the serving policy; a step whose gradients are not finite
(NaN loss) is skipped without touching the weights, and counted. Under ``accelerate launch`` rank 0 shares each
step's samples out and every rank's loss is normalised by the step's tokens: N ranks make one process's update.
"""

from __future__ import annotations

import math
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from claw_train.models.presets import PRESETS, preset_for
from claw_train.runlog.metrics import TRAINER_COUNTERS, Counters
from claw_train.samples.degenerate import repeated_share
from claw_train.samples.records import TrainSample, triage
from claw_train.training.batch import collate, length_groups, token_budget
from claw_train.training.distributed import Ranks, world_size
from claw_train.training.replay import Replay
from claw_train.training.trl_adapter import FedGRPOTrainer, GRPOConfig, use_adapter


@dataclass
class ClawConfig(GRPOConfig):
    """GRPOConfig with claw's defaults and fields.

    The clipped loss, the KL coefficient and the loss normalisation come from TRL; ``temperature``
    must equal the sampler's (TRL divides the training logits by it). On a machine without CUDA the
    config switches to ``use_cpu``, fp32 and no gradient checkpointing.
    """

    max_staleness: int = field(default=2, metadata={"help": "drop samples more than this many versions old"})
    samples_per_step: int = field(default=16, metadata={"help": "samples per optimizer step"})
    micro_batch_tokens: int | None = field(
        default=None,
        metadata={"help": "tokens (rows x padded length) per forward and backward; None: from the machine's memory"},
    )

    epsilon: float = 0.2
    epsilon_high: float | None = 0.28
    beta: float = 0.0
    loss_type: str = "dapo"
    lr_scheduler_type: str = "constant"
    warmup_steps: float = 0
    logging_steps: float = 1
    report_to: str | list[str] | None = "tensorboard"
    save_strategy: str = "steps"
    save_steps: float = 4
    gradient_checkpointing: bool | None = None  # deprecated alias in transformers 5: set activation_checkpointing
    activation_checkpointing: bool | None = False
    per_device_train_batch_size: int = 16
    ddp_find_unused_parameters: bool | None = False  # every weight takes part in the loss (LoRA: the adapters')
    shuffle_dataset: bool | None = False
    disable_tqdm: bool = True
    ignore_data_skip: bool = True

    def __post_init__(self) -> None:
        ranks = world_size()  # samples_per_step is the whole step's, shared out across the launcher's processes
        if self.samples_per_step % (self.per_device_train_batch_size * ranks):
            raise ValueError(
                f"samples_per_step ({self.samples_per_step}) must be a multiple of per_device_train_batch_size "
                f"({self.per_device_train_batch_size}) times the number of processes ({ranks})"
            )
        # one generation (= one pull from the queue) per optimizer step, split into micro-batches
        self.gradient_accumulation_steps = self.samples_per_step // (self.per_device_train_batch_size * ranks)
        self.steps_per_generation = self.gradient_accumulation_steps
        step = self.samples_per_step  # TRL takes a step's rows in groups of num_generations: any divisor of it will do
        self.num_generations = min((d for d in range(2, step + 1) if step % d == 0), default=2)
        if not torch.cuda.is_available():
            self.use_cpu = True
            self.bf16 = False
            self.fp16 = False
            self.activation_checkpointing = False
            self.gradient_checkpointing = None
        super().__post_init__()

    @classmethod
    def for_model(cls, model: str | Path, output_dir: str | Path, **overrides: Any) -> ClawConfig:
        """A config with the model's preset applied, then ``overrides``."""
        values = {**PRESETS[preset_for(model)].optimizer, **overrides}
        return cls(output_dir=str(output_dir), **values)


class SampleSource(Protocol):
    """Where the trainer pulls samples from; ``get`` blocks (never spins) and returns ``None`` once closed."""

    def get(self) -> TrainSample | None:
        """The next sample; blocks until there is one, ``None`` once the source is closed."""


class QueueSource:
    """A thread-safe bounded queue of samples (``put`` blocks when full: backpressure)."""

    def __init__(self, maxsize: int = 0):
        self._queue: queue.Queue[TrainSample | None] = queue.Queue(maxsize)

    def put(self, sample: TrainSample) -> None:
        """Add ``sample``; blocks while the queue is full."""
        self._queue.put(sample)

    def close(self) -> None:
        """Close the queue: ``get`` returns ``None`` once the samples before it are taken."""
        self._queue.put(None)

    def get(self) -> TrainSample | None:
        """The next sample, blocking until there is one; ``None`` once closed (and to every later caller)."""
        item = self._queue.get()
        if item is None:
            self._queue.put(None)  # keep it closed for the next caller
        return item

    def qsize(self) -> int:
        """About how many samples wait in the queue."""
        return self._queue.qsize()


class FeedClosed(Exception):
    """The sample source closed while the trainer waited for a batch (shutdown)."""


def _no_reward(*_: Any, **__: Any) -> list[float]:
    raise RuntimeError("ClawTrainer computes advantages from judged samples; TRL's reward functions are unused")


class ClawTrainer(FedGRPOTrainer):
    """GRPOTrainer whose batches are judged samples from a queue (see the module docstring). ``counters`` (default:
    its own) receives its drops and skips, for a caller that reads them while it trains; ``busy(True)`` is called
    once a step has its samples and ``busy(False)`` when the step is over (its callbacks, publishing included, done):
    what a serving policy on the same cores is told (:meth:`~claw_train.policy.base.Policy.set_training`)."""

    args: ClawConfig

    def __init__(
        self,
        model: Any,
        args: ClawConfig,
        *,
        source: SampleSource,
        processing_class: Any,
        peft_config: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        ranks: Ranks | None = None,
        replay: Replay | None = None,
        counters: Counters | None = None,
        busy: Callable[[bool], None] | None = None,
    ):
        from datasets import Dataset

        # TRL still wants a dataset and a reward function; one row per sample slot drives its loop.
        rows = Dataset.from_dict({"prompt": [""] * args.samples_per_step})
        super().__init__(
            model=model,
            reward_funcs=_no_reward,
            args=args,
            train_dataset=rows,
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=[_SkipNonFinite(self), *(callbacks or []), _StepDone(busy)],
        )
        self.remove_callback(PrinterCallback)  # the pipeline has its own display; metrics go to report_to
        self.source = source
        self.busy = busy or (lambda active: None)
        self.ranks = ranks
        self.replay = replay
        tokenizer = getattr(processing_class, "tokenizer", processing_class)  # a processor holds one
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.current_batch: list[TrainSample] = []
        self.current_dropped: list[TrainSample] = []
        self.invalid_reasons: list[str] = []
        self._counters = counters if counters is not None else Counters(*TRAINER_COUNTERS)
        self.micro_batch_tokens = args.micro_batch_tokens or token_budget(model)

    @property
    def counters(self) -> dict[str, int]:
        """Samples trained and dropped (stale, malformed) and steps skipped (NaN) so far."""
        return self._counters.as_dict()

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to counter ``key`` (thread-safe)."""
        self._counters.add(key, n)

    # -- sample production (the only thing replaced) -----------------------------------------

    def produce_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """This process's share of the step: judged samples from the source, collated for TRL's loss."""
        n = len(inputs)  # this rank's share of the step
        samples, stale, invalid = self._step_samples(n)
        self.busy(True)
        self.current_batch = samples
        self.current_dropped = stale + invalid
        self.count("stale_dropped", len(stale))
        self.count("invalid_dropped", len(invalid))
        self.count("trained", len(samples))
        rank = self.ranks.rank if self.ranks is not None else 0
        mine = samples[rank * n : (rank + 1) * n]
        tokens = sum(len(s.turn.completion_ids) for s in samples)
        batch = collate(mine, self.pad_token_id, self.accelerator.device, tokens=tokens)
        if self.beta != 0.0:
            batch["ref_per_token_logps"] = self._reference_logps(batch)
        self._record_batch_metrics(samples, len(stale), len(invalid))
        return batch

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        """TRL's loss, summed over micro-batches of rows of similar length within ``micro_batch_tokens``
        (:func:`~claw_train.training.batch.length_groups`: the same loss without the padding of a batch mixing short
        and long turns), plus ``replay.coef`` times the supervised loss on a batch of replayed demonstrations. Each
        micro-batch but the last is backpropagated here, so the update's memory is one micro-batch's; the loss
        returned carries the others' value without their graphs."""
        # one forward per backward under DDP (its gradient hooks fire once per step): the ranks' batches stay whole
        single = self.accelerator.num_processes == 1
        parts = length_groups(inputs, max_tokens=self.micro_batch_tokens) if single else [inputs]
        done = torch.zeros((), device=self.accelerator.device)
        for part in parts[:-1]:
            loss = super().compute_loss(model, part, *args, **kwargs)
            self.accelerator.backward(loss)
            done = done + loss.detach()
        loss = super().compute_loss(model, parts[-1], *args, **kwargs)
        if self.replay is not None:
            replayed = self.replay.loss(model)
            self.log_metric("claw/replay_loss", replayed.item())
            loss = loss + self.replay.coef * replayed
        return loss + done

    @torch.no_grad()
    def _reference_logps(self, batch: dict[str, Any]) -> torch.Tensor:
        """The completions' per-token log-probs under the reference model, the anchor of the ``beta`` KL term: the
        initial weights (TRL keeps a copy), or with LoRA the model with its adapter switched off."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        if self.ref_model is not None:
            return self.per_token_logps(self.ref_model, ids, mask, keep)
        model = self.accelerator.unwrap_model(self.model)
        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
            return self.per_token_logps(self.model, ids, mask, keep)

    def _step_samples(self, n: int) -> tuple[list[TrainSample], list[TrainSample], list[TrainSample]]:
        """The step's samples (``n`` per rank) and the stale and malformed ones dropped. Rank 0 takes them and sends
        them to the other ranks; they receive them, or :class:`FeedClosed` once rank 0 has stopped."""
        if self.ranks is None:
            return self._take(n)
        if not self.ranks.main:
            if (samples := self.ranks.share()) is None:
                raise FeedClosed("rank 0 stopped the run")
            return samples, [], []
        try:
            taken = self._take(n * self.ranks.world_size)
        except BaseException:
            self.ranks.share(None)
            raise
        self.ranks.share(taken[0])
        return taken

    def _take(self, n: int) -> tuple[list[TrainSample], list[TrainSample], list[TrainSample]]:
        """Pull ``n`` fresh, well-formed samples; also return the stale and the malformed ones it dropped."""
        version = self.state.global_step
        samples: list[TrainSample] = []
        stale: list[TrainSample] = []
        invalid: list[TrainSample] = []
        while len(samples) < n:
            sample = self.source.get()
            if sample is None:
                raise FeedClosed("the sample source closed")
            verdict = self.triage(sample, version)
            {None: samples, "stale": stale, "invalid": invalid}[verdict].append(sample)
        return samples, stale, invalid

    def triage(self, sample: TrainSample, version: int | None = None) -> str | None:
        """``None`` when ``sample`` would be trained at ``version`` (default: now), else ``"stale"`` or
        ``"invalid"`` (:func:`claw_train.samples.records.triage`; the reason joins ``invalid_reasons``)."""
        version = self.state.global_step if version is None else version
        verdict, problem = triage(sample, version, self.args.max_staleness)
        if problem is not None:
            self.invalid_reasons.append(problem)
        return verdict

    def _record_batch_metrics(self, samples: Sequence[TrainSample], stale: int, invalid: int) -> None:
        version = self.state.global_step
        scores = [s.score for s in samples if s.score is not None]
        adv = [a for s in samples for a in s.advantages]
        for name, value in {
            "claw/stale_dropped": float(stale),
            "claw/invalid_dropped": float(invalid),
            "claw/staleness": sum(version - s.turn.policy_version for s in samples) / len(samples),
            "claw/score_mean": sum(scores) / len(scores) if scores else math.nan,
            "claw/hint_fraction": sum(s.hint is not None for s in samples) / len(samples),
            "claw/advantage_mean": sum(adv) / len(adv),
            "claw/advantage_abs_mean": sum(abs(a) for a in adv) / len(adv),
            "claw/completion_tokens": float(len(adv)),
            "claw/reply_tokens_mean": len(adv) / len(samples),
            "claw/repetition": sum(repeated_share(s.turn.completion_ids) for s in samples) / len(samples),
            "claw/behaviour_nll": -sum(lp for s in samples for lp in s.turn.logprobs) / max(1, len(adv)),
        }.items():
            self.log_metric(name, value)


class _StepDone(TrainerCallback):
    """After every other callback of a step: the trainer no longer needs the cores."""

    def __init__(self, busy: Callable[[bool], None] | None):
        self.busy = busy or (lambda active: None)

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        self.busy(False)


class _SkipNonFinite(TrainerCallback):
    """Before each optimizer step: if any gradient is NaN/inf, drop all gradients so the step changes nothing."""

    def __init__(self, trainer: ClawTrainer):
        self.trainer = trainer

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        params = [p for p in self.trainer.model.parameters() if p.grad is not None]
        if all(torch.isfinite(p.grad).all() for p in params):
            return
        for p in params:
            p.grad = None
        self.trainer.count("nan_skipped")
        self.trainer.log_metric("claw/nan_skipped", 1.0)


def serving_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the weights under the base model's names (LoRA deltas merged in, the model untouched)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(model, PeftModel):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    deltas: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, LoraLayer):
                active = [a for a in module.active_adapters if a in module.lora_A]
                if active:
                    deltas[f"{name}.base_layer.weight"] = sum(module.get_delta_weight(a) for a in active)
        out: dict[str, torch.Tensor] = {}
        for key, value in model.state_dict().items():
            if "lora_" in key:
                continue
            tensor = value.detach().clone()
            if key in deltas:
                tensor += deltas[key].to(tensor.dtype)
            clean = key.removeprefix("base_model.model.").replace(".base_layer.", ".")
            out[clean] = tensor
    return out


class MergedCopy(TrainerCallback):
    """``--merge``: each LoRA checkpoint also holds ``merged/``, the model with the adapter merged in (a plain Hugging
    Face folder with its tokenizer, for tools that do not read adapters)."""

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}" / "merged"
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.save_pretrained(path, state_dict=serving_state_dict(model))
        if (tokenizer := kwargs.get("processing_class")) is not None:
            tokenizer.save_pretrained(path)


class WeightPublisher(TrainerCallback):
    """After each optimizer step (and once at the start, for resumed runs) hand the weights to the serving policy.

    ``publish(weights, version)`` receives a state dict (in-process serving) or, with ``to_disk``, the path of
    a saved Hugging Face model directory (remote servers); the version is the number of updates applied.
    """

    def __init__(self, publish: Callable[[Any, int], None], *, to_disk: Path | None = None):
        self.publish = publish
        self.to_disk = to_disk

    def _send(self, model: torch.nn.Module, version: int) -> None:
        if self.to_disk is None:
            self.publish(serving_state_dict(model), version)
            return
        path = self.to_disk / f"v{version}"
        weights = serving_state_dict(model)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.save_pretrained(path, state_dict=weights)
        self.publish(path, version)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.global_step > 0:  # a new run's policy already serves the weights it starts from
            self._send(model, state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._send(model, state.global_step)
