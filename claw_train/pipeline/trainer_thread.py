"""The trainer's side of the pipeline: :class:`~claw_train.training.trainer.ClawTrainer` in its own thread (blocking
torch), fed from the asyncio sample queue, publishing weights to the serving policy after every optimizer step, writing
the ledger and the per-version logs, running evaluations when due and saving the last checkpoint when the run ends.
Everything it does on the event loop goes through the run's :class:`~claw_train.pipeline.control.LoopBridge`.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_envs import FamilySpec
from claw_envs.retry import retry_sync
from claw_train.options.tree import TrainingConfig
from claw_train.pipeline.control import LoopBridge, RunControl
from claw_train.pipeline.evaluations import Evaluations
from claw_train.pipeline.ranks import RankLink
from claw_train.policy.base import Policy, PolicyError
from claw_train.runlog.checkpoints import last_checkpoint
from claw_train.runlog.logs import Ledger, VersionedLog
from claw_train.runlog.metrics import Counters, Stats
from claw_train.samples.records import TrainSample
from judges.base import Judge

PUBLISH_RETRIES = 2


class SampleFeed:
    """The trainer's view of the asyncio sample queue: a blocking ``get`` from its thread (no polling); a sample
    taken gives its in-flight slot back (it is trained now, or dropped)."""

    def __init__(self, queue: asyncio.Queue[TrainSample], bridge: LoopBridge, closed: asyncio.Event):
        self.queue = queue
        self.bridge = bridge
        self.closed = closed

    async def _get(self) -> TrainSample | None:
        if self.closed.is_set():
            return None
        getter = asyncio.ensure_future(self.queue.get())
        closer = asyncio.ensure_future(self.closed.wait())
        done, _ = await asyncio.wait({getter, closer}, return_when=asyncio.FIRST_COMPLETED)
        closer.cancel()
        if getter in done:
            sample = getter.result()
            sample.turn.release_slot()
            return sample
        getter.cancel()
        return None

    def get(self) -> TrainSample | None:
        """The next sample, waited for on the event loop; ``None`` once the run closes or the loop has."""
        if self.bridge.closed:
            return None
        return self.bridge.run(self._get())


@dataclass(frozen=True)
class TrainerSetup:
    """What the trainer is built from: ``model`` as given (``tiny`` picks its preset), the training options, the
    family (its replay rows), where checkpoints and TensorBoard go, and, for remote policies, where each version's
    weights are written for the servers (``None``: handed over in memory)."""

    model: str
    training: TrainingConfig
    spec: FamilySpec
    output_dir: Path
    seed: int
    temperature: float
    weights_dir: Path | None = None


class TrainerThread:
    """Builds and runs the trainer (see the module docstring). Rank 0 (or a lone process) leads: it publishes,
    logs, evaluates and checkpoints the run; another rank only :meth:`follow`\\ s."""

    def __init__(
        self,
        setup: TrainerSetup,
        *,
        control: RunControl,
        samples: asyncio.Queue[TrainSample],
        stats: Stats,
        drops: Counters,
        link: RankLink,
        log: VersionedLog | None = None,
        ledger: Ledger | None = None,
        policy: Policy | None = None,
        judge: Judge | None = None,
        evaluations: Evaluations | None = None,
        say: Callable[[str], None] = lambda text: None,
    ):
        self.setup = setup
        self.control = control
        self.samples = samples
        self.stats = stats
        self.drops = drops
        self.link = link
        self.log = log
        self.ledger = ledger
        self.policy = policy
        self.judge = judge
        self.evaluations = evaluations
        self.say = say
        self.trainer: Any = None
        self.checkpoint: Path | None = None
        self.thread: threading.Thread | None = None
        self._last_step: float | None = None  # when the last optimizer step ended (its update's time)

    @property
    def step(self) -> int:
        """Optimizer steps made so far."""
        return self.trainer.state.global_step if self.trainer is not None else 0

    def start(self, model_path: str, resume_from: Path | None, done: asyncio.Future[tuple[str, str]]) -> None:
        """Start the thread; it resolves ``done`` with ``(status, message)`` when it returns."""
        self.thread = threading.Thread(
            target=self._main, args=(model_path, resume_from, done), name="claw-trainer", daemon=True
        )
        self.thread.start()

    async def join(self) -> None:
        """Wait, off the event loop, until the trainer thread has ended (at once if it never started)."""
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join)

    def _main(self, model_path: str, resume_from: Path | None, done: asyncio.Future[tuple[str, str]]) -> None:
        bridge = self._bridge()

        def finish(status: str, message: str) -> None:
            bridge.call(lambda: done.done() or done.set_result((status, message)))

        try:
            self.link.go(model_path, resume_from)  # the other ranks build their trainer now
            self.trainer = self._build(model_path)
            self.stats.set_status("training")
            self.trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except Exception as err:
            from claw_train.training.trainer import FeedClosed

            closed = isinstance(err, FeedClosed)
            if not closed:
                self.control.request_stop("error", f"trainer failed: {type(err).__name__}: {err}")
            self.save_checkpoint(in_step=closed)
            finish(*(self.control.stop_reason or ("stopped", "stopped")))
            return
        self.save_checkpoint()
        message = f"finished {self.step} updates"
        self.control.request_stop("done", message)
        finish("done", message)

    def follow(self, model_path: str, resume_from: Path | None) -> tuple[str, str]:
        """Another rank (:mod:`~claw_train.pipeline.ranks`): train on this rank's share of rank 0's samples until
        rank 0 stops; returns ``(status, message)``. Publishes and logs nothing; checkpoints with rank 0."""
        from claw_train.training.trainer import FeedClosed

        self.trainer = self._build(model_path, lead=False)
        try:
            self.trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except FeedClosed:
            self.save_checkpoint()
            return "done", f"rank 0 stopped the run after {self.step} updates"
        self.save_checkpoint()
        return "done", f"finished {self.step} updates"

    def _bridge(self) -> LoopBridge:
        if self.control.bridge is None:
            raise RuntimeError("the run control is not bound to an event loop")
        return self.control.bridge

    def _build(self, model_path: str, *, lead: bool = True) -> Any:
        import torch
        from transformers import AutoTokenizer

        from claw_train.policy.hf import from_pretrained_merged
        from claw_train.training.options import check_lora_targets, grpo_config, lora_config
        from claw_train.training.replay import Replay, replay_rows
        from claw_train.training.trainer import ClawTrainer, MergedCopy, WeightPublisher

        s = self.setup
        args = grpo_config(
            s.training,
            model=s.model if s.model == "tiny" else model_path,
            output_dir=s.output_dir,
            seed=s.seed,
            temperature=s.temperature,
        )
        dtype = torch.float32 if args.use_cpu else "auto"
        model = from_pretrained_merged(model_path, dtype=dtype)  # a LoRA checkpoint continues merged
        check_lora_targets(model, s.training)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        callbacks = [WeightPublisher(self._publish, to_disk=s.weights_dir), _glue_callback(self)] if lead else []
        callbacks += [MergedCopy()] if lead and s.training.merge else []
        rows = replay_rows(s.training, s.spec, s.model)
        replay = Replay(rows, tokenizer, coef=s.training.replay or 0.0, seed=s.seed) if rows else None
        return ClawTrainer(
            model,
            args,
            source=SampleFeed(self.samples, self._bridge(), self.control.closed),
            processing_class=tokenizer,
            peft_config=lora_config(s.training),
            callbacks=callbacks,
            ranks=self.link.ranks,
            replay=replay,
            counters=self.drops,
            busy=self.policy.set_training if self.policy is not None else None,
        )

    def _publish(self, weights: Any, version: int) -> None:
        """Hand version ``version`` to the serving policy; retried, and a publish that keeps failing stops the run
        (serving would go on with old weights while the trainer moved on)."""
        policy, log = self.policy, self.log
        assert policy is not None and log is not None, "only the leading rank publishes"

        def attempt() -> None:
            try:
                policy.publish(weights, version)
            except PolicyError as err:
                self.stats.add("publish_errors")
                log.write(version, {"kind": "event", "event": "publish_failed", "error": str(err)})
                self.say(f"publishing weights v{version} failed: {err}")
                raise

        try:
            retry_sync(attempt, retries=PUBLISH_RETRIES, backoff=1.0, retry_on=lambda e: isinstance(e, PolicyError))
        except PolicyError as err:
            where = f" (the servers must read {weights} at that path)" if isinstance(weights, Path) else ""
            self.control.request_stop(
                "error", f"publishing weights v{version} failed {PUBLISH_RETRIES + 1} times{where}: {err}"
            )
            return
        self.stats.published(version)
        self.control.mark_served()

    def save_checkpoint(self, *, in_step: bool = True) -> None:
        """Save the last update's checkpoint if the trainer has not (the run is ending). Across processes every
        rank saves together, as rank 0 decides; ``in_step=False`` (the trainer failed mid-step, the ranks may be
        out of step) saves nothing new there: the last checkpoint is the one kept."""
        trainer = self.trainer
        if trainer is None:
            return
        ranks = self.link.ranks
        root = self.setup.output_dir / "checkpoints"
        path = root / f"checkpoint-{trainer.state.global_step}"
        try:
            needed = not (path / "trainer_state.json").exists() and trainer.state.global_step > 0
            if ranks is not None:
                if not in_step:
                    self.checkpoint = last_checkpoint(root)
                    self.say(f"the ranks are out of step: no final checkpoint; the last one is {self.checkpoint}")
                    return
                needed = ranks.share(needed)
            if needed:
                trainer.save_checkpoint()
            if path.exists():
                self.checkpoint = path
        except Exception as err:  # the run is ending anyway: say so, keep what is on disk
            self.say(f"could not save a checkpoint: {err}")

    def on_step_end(self) -> None:
        """After each optimizer step (trainer thread): ledger, logs, stats, evaluation when due."""
        trainer, log, ledger = self.trainer, self.log, self.ledger
        assert log is not None and ledger is not None, "only the leading rank records steps"
        step = trainer.state.global_step
        batch = trainer.current_batch
        log.flush()  # every turn the ledger is about to name is in the logs first (a kill -9 keeps them)
        ledger.update(
            step,
            [s.sample_id for s in batch],
            dropped=[s.sample_id for s in trainer.current_dropped],
            versions=[s.turn.policy_version for s in batch],
            score_mean=mean([s.score for s in batch if s.score is not None]),
        )
        staleness = mean([step - 1 - s.turn.policy_version for s in batch]) or 0.0
        self.stats.trained(len(batch), staleness)
        now = time.monotonic()
        seconds, self._last_step = now - (self._last_step or self.stats.train_started or now), now
        log.write(
            step,
            {
                "kind": "update",
                "update": step,
                "samples": [s.sample_id for s in batch],
                "staleness": staleness,
                "update_seconds": round(seconds, 3),
                "samples_per_s": round(self.stats.samples_per_second(), 4),
                "nan_skipped": trainer.counters.get("nan_skipped", 0),
                "judge": self.judge.metrics_dict() if self.judge is not None else None,
                "masked": self.stats.snapshot()["masked"],
            },
        )
        self.control.step_done(step)
        self.maybe_evaluate(step)

    def on_log(self, step: int, logs: dict[str, Any]) -> None:
        """The trainer logged its figures for update ``step`` (loss, clip ratios, entropy, KL with a beta; TRL logs
        them after the step's end): one ``metrics`` line beside the update's."""
        numbers = {k: v for k, v in logs.items() if isinstance(v, int | float) and math.isfinite(v)}
        if self.log is not None:  # the leading rank records
            self.log.write(step, {"kind": "metrics", "update": step, "metrics": numbers})

    def maybe_evaluate(self, step: int) -> None:
        """Evaluate version ``step`` if the schedule says so (blocks the trainer while it runs)."""
        if self.evaluations is None or not self.evaluations.due(step):
            return
        self.stats.set_status(f"evaluating version {step}")
        try:
            self._bridge().run(self.evaluations.run(step))
        except Exception as err:
            self.say(f"evaluation at update {step} failed: {type(err).__name__}: {err}")
        self.stats.set_status("training")

    def train_begins(self, step: int) -> None:
        """The trainer starts at ``step`` (a resumed run's checkpoint): the version serving, perhaps evaluated."""
        self.stats.training_started(step)
        self.control.step_done(step)
        self.maybe_evaluate(step)


def _glue_callback(owner: TrainerThread) -> Any:
    """The TrainerCallback that ties the trainer's steps to the pipeline (built here so that importing this
    module does not import transformers)."""
    from transformers import TrainerCallback

    class PipelineCallback(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            owner.train_begins(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            owner.on_step_end()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and state.global_step > 0:
                owner.on_log(state.global_step, logs)

    return PipelineCallback()


def mean(values: list[float]) -> float | None:
    """The mean of the finite values (None when there are none)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None
