"""The trainer's side of the pipeline: :class:`~claw_train.trainer.ClawTrainer` in its own thread (blocking torch),
fed from the asyncio sample queue, publishing weights to the serving policy after every optimizer step, writing
the ledger and the per-version logs, scheduling evaluations and saving the last checkpoint when the run ends.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_envs.retry import retry_sync
from claw_train.pipeline.reporting import eval_due, evaluate
from claw_train.pipeline.rundir import last_checkpoint
from claw_train.policy.base import PolicyError
from claw_train.records import TrainSample

if TYPE_CHECKING:
    from claw_train.pipeline.core import Pipeline

PUBLISH_RETRIES = 2


class SampleFeed:
    """The trainer's view of the asyncio sample queue: a blocking ``get`` from its thread (no polling)."""

    def __init__(
        self,
        queue: asyncio.Queue[TrainSample],
        loop: asyncio.AbstractEventLoop,
        closed: asyncio.Event,
        on_take: Callable[[], None] = lambda: None,
    ):
        self.queue = queue
        self.loop = loop
        self.closed = closed
        self.on_take = on_take

    async def _get(self) -> TrainSample | None:
        if self.closed.is_set():
            return None
        getter = asyncio.ensure_future(self.queue.get())
        closer = asyncio.ensure_future(self.closed.wait())
        done, _ = await asyncio.wait({getter, closer}, return_when=asyncio.FIRST_COMPLETED)
        closer.cancel()
        if getter in done:
            self.on_take()
            return getter.result()
        getter.cancel()
        return None

    def get(self) -> TrainSample | None:
        """The next sample, waited for on the event loop; ``None`` once the run closes or the loop has."""
        if self.loop.is_closed():
            return None
        return asyncio.run_coroutine_threadsafe(self._get(), self.loop).result()


class TrainerThread:
    """Builds and runs the trainer for ``pipeline`` (see the module docstring)."""

    def __init__(self, pipeline: Pipeline):
        self.p = pipeline
        self.trainer: Any = None
        self.checkpoint: Path | None = None
        self.thread: threading.Thread | None = None
        self._last_step: float | None = None  # when the last optimizer step ended (its update's time)

    @property
    def step(self) -> int:
        """Optimizer steps made so far."""
        return self.trainer.state.global_step if self.trainer is not None else 0

    def start(self, resume_from: Path | None, done: asyncio.Future[tuple[str, str]]) -> None:
        """Start the thread; it resolves ``done`` with ``(status, message)`` when it returns."""
        self.thread = threading.Thread(target=self._main, args=(resume_from, done), name="claw-trainer", daemon=True)
        self.thread.start()

    async def join(self) -> None:
        """Wait, off the event loop, until the trainer thread has ended (at once if it never started)."""
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join)

    def _main(self, resume_from: Path | None, done: asyncio.Future[tuple[str, str]]) -> None:
        p = self.p

        def finish(status: str, message: str) -> None:
            p.loop.call_soon_threadsafe(lambda: done.done() or done.set_result((status, message)))

        try:
            p.link.go(str(p.model_path), resume_from)  # the other ranks build their trainer now
            self.trainer = self._build()
            p.stats.status = "training"
            self.trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except Exception as err:
            from claw_train.trainer import FeedClosed

            closed = isinstance(err, FeedClosed)
            if not closed:
                p.request_stop("error", f"trainer failed: {type(err).__name__}: {err}")
            self.save_checkpoint(in_step=closed)
            finish(*(p.stop_reason or ("stopped", "stopped")))
            return
        self.save_checkpoint()
        message = f"finished {self.step} updates"
        p.request_stop("done", message)
        finish("done", message)

    def follow(self, resume_from: Path | None) -> tuple[str, str]:
        """Another rank (:mod:`~claw_train.pipeline.ranks`): train on this rank's share of rank 0's samples until
        rank 0 stops; returns ``(status, message)``. Publishes and logs nothing; checkpoints with rank 0."""
        from claw_train.trainer import FeedClosed

        self.trainer = self._build(lead=False)
        try:
            self.trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except FeedClosed:
            self.save_checkpoint()
            return "done", f"rank 0 stopped the run after {self.step} updates"
        self.save_checkpoint()
        return "done", f"finished {self.step} updates"

    def _build(self, *, lead: bool = True) -> Any:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from claw_train.replay import Replay, replay_rows
        from claw_train.trainer import ClawTrainer, WeightPublisher
        from claw_train.trainer_options import grpo_config, lora_config

        p = self.p
        model_spec = "tiny" if p.run_cfg.model == "tiny" else p.model_path
        args = grpo_config(
            p.training, model=model_spec, output_dir=p.out, seed=p.run_cfg.seed, temperature=p.rollout.temperature
        )
        dtype = torch.float32 if args.use_cpu else "auto"
        model = AutoModelForCausalLM.from_pretrained(p.model_path, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(p.model_path)
        to_disk = None if p.run_cfg.policy == "inprocess" else (p.training.publish_dir or p.out / "weights")
        callbacks = [WeightPublisher(self._publish, to_disk=to_disk), _glue_callback(self)] if lead else []
        feed = SampleFeed(p.sample_q, p.loop, p.closed, on_take=lambda: p.free(1))
        rows = replay_rows(p.training, p.spec, p.run_cfg.model)
        replay = Replay(rows, tokenizer, coef=p.training.replay or 0.0, seed=p.run_cfg.seed) if rows else None
        return ClawTrainer(
            model,
            args,
            source=feed,
            processing_class=tokenizer,
            peft_config=lora_config(p.training),
            callbacks=callbacks,
            ranks=p.link.ranks,
            replay=replay,
        )

    def _publish(self, weights: Any, version: int) -> None:
        """Hand version ``version`` to the serving policy; retried, and a publish that keeps failing stops the run
        (serving would go on with old weights while the trainer moved on)."""
        p = self.p

        def attempt() -> None:
            try:
                p.policy.inner.publish(weights, version)
            except PolicyError as err:
                p.stats.add("publish_errors")
                p.log.write(version, {"kind": "event", "event": "publish_failed", "error": str(err)})
                p.say(f"publishing weights v{version} failed: {err}")
                raise

        try:
            retry_sync(attempt, retries=PUBLISH_RETRIES, backoff=1.0, retry_on=lambda e: isinstance(e, PolicyError))
        except PolicyError as err:
            where = f" (the servers must read {weights} at that path)" if isinstance(weights, Path) else ""
            p.request_stop("error", f"publishing weights v{version} failed {PUBLISH_RETRIES + 1} times{where}: {err}")
            return
        p.stats.version = version
        p.loop.call_soon_threadsafe(p.served.set)

    def save_checkpoint(self, *, in_step: bool = True) -> None:
        """Save the last update's checkpoint if the trainer has not (the run is ending). Across processes every
        rank saves together, as rank 0 decides; ``in_step=False`` (the trainer failed mid-step, the ranks may be
        out of step) saves nothing new there: the last checkpoint is the one kept."""
        trainer = self.trainer
        if trainer is None:
            return
        ranks = self.p.link.ranks
        path = self.p.out / "checkpoints" / f"checkpoint-{trainer.state.global_step}"
        try:
            needed = not (path / "trainer_state.json").exists() and trainer.state.global_step > 0
            if ranks is not None:
                if not in_step:
                    self.checkpoint = last_checkpoint(self.p.out / "checkpoints")
                    self.p.say(f"the ranks are out of step: no final checkpoint; the last one is {self.checkpoint}")
                    return
                needed = ranks.share(needed)
            if needed:
                trainer._save_checkpoint(trainer.model, trial=None)
            if path.exists():
                self.checkpoint = path
        except Exception as err:  # the run is ending anyway: say so, keep what is on disk
            self.p.say(f"could not save a checkpoint: {err}")

    def on_step_end(self) -> None:
        """After each optimizer step (trainer thread): ledger, logs, stats, evaluation when due."""
        p, trainer = self.p, self.trainer
        step = trainer.state.global_step
        batch = trainer.current_batch
        p.log.flush()  # every turn the ledger is about to name is in the logs first (a kill -9 keeps them)
        p.rundir.ledger.update(
            step,
            [s.sample_id for s in batch],
            dropped=[s.sample_id for s in trainer.current_dropped],
            versions=[s.turn.policy_version for s in batch],
            score_mean=mean([s.score for s in batch if s.score is not None]),
        )
        p.stats.trained(len(batch))
        p.stats.staleness = mean([step - 1 - s.turn.policy_version for s in batch]) or 0.0
        now = time.monotonic()
        seconds, self._last_step = now - (self._last_step or p.stats.train_started or now), now
        p.log.write(
            step,
            {
                "kind": "update",
                "update": step,
                "samples": [s.sample_id for s in batch],
                "staleness": p.stats.staleness,
                "update_seconds": round(seconds, 3),
                "samples_per_s": round(p.stats.samples_per_second(), 4),
                "nan_skipped": trainer.counters.get("nan_skipped", 0),
                "judge": p.judge.metrics_dict() if hasattr(p.judge, "metrics_dict") else None,
                "masked": dict(p.stats.masked),
            },
        )
        p.step_done()
        self.maybe_evaluate(step)

    def on_log(self, step: int, logs: dict[str, Any]) -> None:
        """The trainer logged its figures for update ``step`` (loss, clip ratios, entropy, KL with a beta; TRL logs
        them after the step's end): one ``metrics`` line beside the update's."""
        numbers = {k: v for k, v in logs.items() if isinstance(v, int | float) and math.isfinite(v)}
        self.p.log.write(step, {"kind": "metrics", "update": step, "metrics": numbers})

    def maybe_evaluate(self, step: int) -> None:
        """Evaluate version ``step`` if the schedule says so (blocks the trainer while it runs)."""
        p = self.p
        if not eval_due(p, step):
            return
        p.stats.status = f"evaluating version {step}"
        future = asyncio.run_coroutine_threadsafe(evaluate(p, step), p.loop)
        try:
            future.result()
        except Exception as err:
            p.say(f"evaluation at update {step} failed: {type(err).__name__}: {err}")
        p.stats.status = "training"


def _glue_callback(owner: TrainerThread) -> Any:
    """The TrainerCallback that ties the trainer's steps to the pipeline (built here so that importing this
    module does not import transformers)."""
    from transformers import TrainerCallback

    class PipelineCallback(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            owner.p.stats.version = state.global_step
            owner.p.stats.train_started = time.monotonic()
            owner.maybe_evaluate(state.global_step)

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
