"""``Pipeline.run()``: the wiring of one online training run (see the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from claw_train.config import EvalConfig, ServeArgs, TrainArgs, as_flat_dict
from claw_train.families import env_kwargs_for, max_turns_of, spec_for, tasks_for
from claw_train.judging import SampleMaker
from claw_train.logs import VersionedLog
from claw_train.metrics import Stats
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.cluster import join_cluster, rollout_pool, worker_policy
from claw_train.pipeline.guards import first_failure, watch_for_signal
from claw_train.pipeline.ranks import RankLink
from claw_train.pipeline.reporting import write_summary
from claw_train.pipeline.rollouts import EnvRollouts, Item, SyncRounds, turns_in
from claw_train.pipeline.rundir import RunDir, RunError, checkpoint_step
from claw_train.pipeline.trainer_thread import TrainerThread
from claw_train.pipeline.workers import RolloutWorkers
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.policy.guarded import GuardedPolicy, PolicyDown
from claw_train.records import TrainSample

GENERATION_FAILURE_STREAK = 32  # episodes in a row whose generation failed (the probe answering): stop
ENV_FAILURE_STREAK = 8  # episodes in a row that fail before any succeeded: the env is broken, stop


class TurnSource(Protocol):
    """Where turns come from: env rollouts, sync rounds, or the server's live sessions."""

    def start(self) -> list[asyncio.Task]:
        """Start the source's tasks (they put turns on the pipeline's turn queue)."""
        ...


@dataclass
class PipelineResult:
    """How a run ended and what it measured."""

    status: str  # "done" | "interrupted" | "policy_failed" | "error"
    message: str
    updates: int
    wall_time: float
    evals: list[dict[str, Any]]
    counters: dict[str, Any]
    output_dir: Path
    checkpoint: Path | None = None

    @property
    def exit_code(self) -> int:
        """The process exit status: 0 when done, 130 when interrupted, else 1."""
        return {"done": 0, "interrupted": 130}.get(self.status, 1)


class Pipeline:
    """One online training run over resolved options (:func:`claw_train.config.resolve`).

    ``policy``/``judge`` may be injected (tests); ``model_path`` is ``--model`` already resolved (e.g. the
    bootstrapped tiny model's directory); ``source`` builds the turn source (default: env rollouts, or sync
    rounds with ``--sync``); ``train=False`` serves and logs without a trainer.
    """

    def __init__(
        self,
        args: TrainArgs | ServeArgs,
        *,
        policy: Policy | None = None,
        judge: Any = None,
        model_path: str | None = None,
        on_message: Callable[[str], None] | None = None,
        source: Callable[[Pipeline], TurnSource] | None = None,
        train: bool = True,
        title: str | None = None,
    ):
        self.args = args
        self.run_cfg, self.rollout, self.training = args.run, args.rollout, args.training
        self.evaluation: EvalConfig = getattr(args, "evaluation", EvalConfig())
        self.sync: bool = getattr(args, "sync", False)
        self.eval_every: int = getattr(args, "eval_every", None) or 0
        self.eval_at: tuple[int, ...] = tuple(getattr(args, "eval_at", ()))
        try:
            self.spec = spec_for(args.run.env)
        except ValueError as err:
            raise RunError(str(err)) from None
        self.env_id = self.spec.env_id
        self.personal = self.spec.track == "personal"
        self.out = Path(args.run.output_dir or Path("runs") / f"{self.spec.name}-{args.training.method}")
        self.rundir = RunDir(self.out)
        self.stats = Stats()
        self.say: Callable[[str], None] = on_message or (lambda text: None)
        self.train = train
        self._policy_arg, self._judge_arg, self.model_path = policy, judge, model_path
        self._source_factory = source or (SyncRounds if self.sync else EnvRollouts)
        self.source: TurnSource | None = None
        self._title = title
        self.evals: list[dict[str, Any]] = []
        self.stop_reason: tuple[str, str] | None = None
        self.attempt = 0
        self.rng = np.random.default_rng(args.run.seed)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = asyncio.Event()
        self.served = asyncio.Event()  # the trainer's weights are serving (resume: the checkpoint's)
        self._step_event = asyncio.Event()
        queue_size = args.training.samples_per_step  # small queues keep samples fresh and the CPU for training
        self.turn_q: asyncio.Queue[Item] = asyncio.Queue(
            queue_size if self.personal else max(1, args.rollout.rollout_workers or 1)
        )
        self.sample_q: asyncio.Queue[TrainSample] = asyncio.Queue(queue_size)
        self.budget: InFlightBudget | None = None
        self.trainer_thread = TrainerThread(self)
        self.link = RankLink()  # the launcher's other processes, under accelerate launch
        self.policy: GuardedPolicy | None = None
        self.judge: Any = None
        self.samples: SampleMaker | None = None
        self.sampling = SamplingParams(max_new_tokens=args.rollout.max_new_tokens, temperature=args.rollout.temperature)
        self.pool: Any = None
        self.log: VersionedLog | None = None
        self.tasks: Any = None
        self._env_failures = 0
        self._env_ok = False
        self.generation_failures = 0  # episodes in a row whose generation failed

    # -- public -----------------------------------------------------------------------------

    def request_stop(self, status: str, message: str) -> None:
        """Stop the run (first reason wins): rollouts end, the trainer checkpoints and returns."""
        if self.stop_reason is None:
            self.stop_reason = (status, message)
            self.stats.status = f"stopping: {message}"
            self.say(f"stopping: {message}")
        if self.loop is None:
            return
        try:
            in_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            in_loop = False
        if in_loop:  # at once: a worker that never suspends would never run a scheduled callback
            self.closed.set()
        else:
            self.loop.call_soon_threadsafe(self.closed.set)

    def snapshot(self) -> dict[str, Any]:
        """What the live display shows."""
        snap = self.stats.snapshot()
        snap["turn_queue"] = self.turn_q.qsize()
        snap["sample_queue"] = self.sample_q.qsize()
        snap["samples_per_second"] = self.stats.samples_per_second()
        snap["updates"] = self.trainer_step()
        snap["target"] = self.training.updates
        if self.trainer_thread.trainer is not None:
            snap["trainer"] = dict(self.trainer_thread.trainer.counters)
        if self.judge is not None and hasattr(self.judge, "metrics_dict"):
            snap["judge"] = self.judge.metrics_dict()
        return snap

    def title(self) -> str:
        """The run's title: the one given, else env · method · model · sync or async."""
        mode = "sync" if self.sync else "async"
        return self._title or f"{self.env_id} · {self.training.method} · {self.run_cfg.model} · {mode}"

    async def run(self) -> PipelineResult:
        """Run to ``updates`` optimizer steps (or until stopped); always leaves a checkpoint and the logs."""
        started = time.monotonic()
        self.loop = asyncio.get_running_loop()
        if self.train and (other_rank := await self.link.join(self)) is not None:
            return other_rank  # it trained on its share of rank 0's samples
        try:
            resume_from = self._prepare()
        except RunError as err:
            await asyncio.to_thread(self.link.turn_away, str(err))
            raise
        restore_signals = self._install_stop_signals()
        tasks: list[asyncio.Task] = []
        status, message = "error", "did not start"
        try:
            await self._load_parts()
            if resume_from is None:
                self.served.set()
            trainer_done: asyncio.Future[tuple[str, str]] = self.loop.create_future()
            if self.train:
                self.trainer_thread.start(resume_from, trainer_done)
            else:
                waiter = asyncio.ensure_future(self.closed.wait())  # serving only: done when closed
                waiter.add_done_callback(lambda _: trainer_done.done() or trainer_done.set_result(("stopped",) * 2))
            tasks += self._start_workers()
            watch = asyncio.ensure_future(first_failure(tasks))
            done, _ = await asyncio.wait({trainer_done, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and trainer_done not in done:
                err = watch.result()
                self.request_stop("error", f"a worker failed: {type(err).__name__}: {err}")
                await trainer_done
            status, message = trainer_done.result()
            await self.trainer_thread.join()
        except RunError as err:
            message = str(err)
            raise
        except PolicyError as err:
            status, message = "policy_failed", f"the policy could not start: {err}"
        finally:
            await asyncio.to_thread(self.link.turn_away, message)  # other ranks still waiting to start: exit
            restore_signals()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close_parts()
        if self.stop_reason is not None and status in ("done", "stopped"):
            status, message = self.stop_reason
        if status == "stopped":
            status = "interrupted"
        result = PipelineResult(
            status=status,
            message=message,
            updates=self.trainer_step(),
            wall_time=time.monotonic() - started,
            evals=list(self.evals),
            counters=self.snapshot(),
            output_dir=self.out,
            checkpoint=self.trainer_thread.checkpoint,
        )
        write_summary(self, result)
        return result

    # -- setup ------------------------------------------------------------------------------

    def _prepare(self) -> Path | None:
        options = as_flat_dict(self.args) | {"env": self.env_id}
        resume_from = self.rundir.prepare(options, resume=self.training.resume)
        resuming = self.training.resume
        self.attempt = self.rundir.ledger.attempts() + (1 if resuming else 0)
        if resuming:  # from the last checkpoint, or from the start when the run was stopped before its first
            step = checkpoint_step(resume_from) if resume_from is not None else 0
            self.rundir.ledger.resume(step, self.attempt)
            self.evals = self.rundir.evals_until(step)
            if resume_from is None:
                self.say("--resume: no checkpoint was saved yet; training starts again from the initial weights")
        self.log = VersionedLog(self.out / "logs")
        self.rng = np.random.default_rng([self.run_cfg.seed, self.attempt])
        return resume_from

    async def _load_parts(self) -> None:
        await asyncio.to_thread(join_cluster, self.rollout)  # an unreachable --ray-address fails before any model
        self.stats.status = "loading the policy"
        if self.rollout.tasks is not None or not self.personal:  # agent groups draw their task here
            self.tasks = tasks_for(self.spec, self.rollout.tasks, "train")
        if self.model_path is None:
            self.model_path = await asyncio.to_thread(self._resolve_model)
        inner = self._policy_arg or await asyncio.to_thread(self._load_policy)
        self.policy = GuardedPolicy(inner)
        try:
            self.judge = self._judge_arg or self._make_judge()
        except ValueError as err:
            raise RunError(f"--judge {self.training.judge}: {err}") from None
        await self._check_endpoints()
        self.samples = SampleMaker(
            method=self.training.method,
            judge=self.judge,
            policy=self.policy,
            stats=self.stats,
            log=self.log,
            attempt=self.attempt,
            w_rl=self.training.w_rl,
            w_opd=self.training.w_opd,
            prm_c=self.training.prm_c,
            temperature=self.rollout.temperature,
            fatal=lambda err: isinstance(err, PolicyDown),
        )

    async def _check_endpoints(self) -> None:
        """A judge or policy server that cannot be reached stops the run before it starts, saying which."""
        reachable = getattr(self.judge, "reachable", None)
        problem = await reachable() if reachable is not None else None
        if problem:
            raise RunError(f"--judge {self.training.judge}: {problem}")
        remote = self.run_cfg.policy != "inprocess" and self._policy_arg is None
        if remote and not await self.policy.healthy():
            raise RunError(f"--policy {self.run_cfg.policy}: the server does not answer a one-token request")

    def _resolve_model(self) -> str:
        from claw_train.policy.loader import resolve_model

        return resolve_model(self.run_cfg.model, family=self.spec.name, progress=False, say=self.say)

    def _load_policy(self) -> Policy:
        from claw_train.policy.loader import load_policy

        model = self.model_path if self.run_cfg.policy == "inprocess" else self.run_cfg.model
        return load_policy(
            model, self.run_cfg.policy, family=self.spec.name, progress=False, retries=self.training.policy_retries
        )

    def _make_judge(self) -> Any:
        from claw_train.config import yaml_values
        from judges import make_judge

        return make_judge(
            self.training.judge,
            family=self.spec,
            votes=self.training.votes,
            policy=self.policy.inner if self.training.judge == "policy" else None,
            hints=self.training.method != "binary",
            **yaml_values(self.training.judge_options),
        )

    def _make_budget(self) -> InFlightBudget:
        """At most ``samples_per_step x in_flight_batches`` turns between generation and training (so samples stay
        within max_staleness versions); for grouped rollouts at least one whole group's allotment."""
        limit = self.training.samples_per_step * self.training.in_flight_batches
        if self.personal and not isinstance(self.pool, RolloutWorkers):
            return InFlightBudget(limit)
        max_turns = self.rollout.max_turns or env_kwargs_for(self.spec, self.rollout).get("max_turns")
        max_turns = int(max_turns or max_turns_of(self.spec, self.rollout))
        if self.personal:  # an episode on a Ray rollout worker hands its turns over when it ends: all its slots
            return InFlightBudget(limit, max_turns)
        return InFlightBudget(limit, self.training.group_size * max_turns)

    def _start_workers(self) -> list[asyncio.Task]:
        """The env pool (when the source plays episodes), the turn source and the judge workers."""
        source = self.source = self._source_factory(self)
        if isinstance(source, EnvRollouts | SyncRounds):
            per_worker = 1 if self.personal else self.training.group_size
            kwargs = env_kwargs_for(self.spec, self.rollout)
            if self.tasks is not None:
                kwargs.setdefault("tasks", self.tasks)
            size = self.rollout.rollout_workers * per_worker
            self.pool = rollout_pool(self.env_id, size, kwargs, self.rollout, worker_policy(self))
            if isinstance(self.pool, RolloutWorkers):
                self.say(f"rollouts: up to {size} rollout workers (env + policy client) on the Ray cluster")
            self.budget = None if self.sync else self._make_budget()
            self.stats.status = "running (sync)" if self.sync else "running"
        tasks = source.start()
        if self.train and not self.sync:
            tasks += [asyncio.create_task(self._judge_worker()) for _ in range(self.training.judge_workers)]
        if self.train and self.pool is not None and self.training.max_wait_for_signal > 0:
            tasks.append(asyncio.create_task(watch_for_signal(self, self.training.max_wait_for_signal)))
        return tasks

    def _install_stop_signals(self) -> Callable[[], None]:
        """Ctrl-C and SIGTERM (a supervisor stopping the run) both checkpoint, then stop; returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        names = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
        try:
            for sig, name in names.items():
                self.loop.add_signal_handler(
                    sig, functools.partial(self.request_stop, "interrupted", f"{name}: checkpointing, then exiting")
                )
        except (NotImplementedError, RuntimeError):
            return lambda: None

        def restore() -> None:
            for sig in names:
                self.loop.remove_signal_handler(sig)

        return restore

    async def _close_parts(self) -> None:
        for part in (self.pool, self.judge, self.policy.inner if self.policy else self._policy_arg):
            closer = getattr(part, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closer(), 60)
        if self.log is not None:
            self.log.close()

    # -- the loops' shared helpers ----------------------------------------------------------------

    async def put_turn(self, item: Item) -> None:
        """Hand a turn (personal track) or a group of episodes (agent track) to the judges."""
        self.stats.add("turns", turns_in(item))
        await self.turn_q.put(item)

    def judge_item(self, item: Item) -> Awaitable[list[TrainSample]]:
        """The training samples judged from a turn (personal track) or a group of episodes (agent track)."""
        return self.samples.group(item) if isinstance(item, list) else self.samples.personal(item)

    async def _judge_worker(self) -> None:
        while True:
            item = await self.turn_q.get()
            try:
                samples = await self.judge_item(item)
            except PolicyDown as err:  # the teacher prefill found the policy dead
                self.request_stop("policy_failed", str(err))
                return
            self.free(turns_in(item) - len(samples))  # masked turns leave the in-flight budget now
            self._warn_if_starved()
            for sample in samples:
                await self.sample_q.put(sample)

    def free(self, n: int) -> None:
        """Give ``n`` in-flight slots back (turns trained or masked)."""
        if self.budget is not None:
            self.budget.free(n)

    def note_env_failure(self, error: str) -> None:
        """An episode failed in the env: after a streak with no success ever, the env is broken — stop."""
        self._env_failures += 1
        if not self._env_ok and self._env_failures >= ENV_FAILURE_STREAK:
            self.request_stop("error", f"the env failed on each of the first {self._env_failures} episodes: {error}")

    def note_generation_error(self, err: Exception) -> None:
        """A generation failed though the policy answered its health probe; many in a row stop the run."""
        self.stats.add("generation_errors")
        self.generation_failures += 1
        if self.generation_failures >= GENERATION_FAILURE_STREAK:
            failed = f"the policy failed {self.generation_failures} episodes in a row (its health probe answered)"
            self.request_stop("policy_failed", f"{failed}: {err}")

    def note_env_success(self) -> None:
        """An episode ran in the env: the env works, and the failure streak starts again."""
        self._env_ok = True
        self._env_failures = 0

    def _warn_if_starved(self) -> None:
        """Say so when many turns in a row were masked: training waits for signal, it has not hung."""
        snap = self.stats.snapshot()
        masked, samples = snap["counts"].get("masked", 0), snap["counts"].get("samples", 0)
        if samples == 0 and masked in (100, 1000, 10000):
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(snap["masked"].items()))
            self.say(f"no trainable sample yet after {masked} turns (masked: {reasons}); training waits for signal")

    def trainer_step(self) -> int:
        """Optimizer steps the trainer has made so far."""
        return self.trainer_thread.step

    def step_done(self) -> None:
        """The trainer made a step (its thread): wake :meth:`wait_step`."""
        self.loop.call_soon_threadsafe(self._step_event.set)

    async def wait_step(self, step: int) -> None:
        """Wait (no polling) until the trainer has made optimizer step ``step`` or the run stops."""
        while self.trainer_step() < step and not self.closed.is_set():
            self._step_event.clear()
            if self.trainer_step() >= step:
                return
            waits = [asyncio.ensure_future(self._step_event.wait()), asyncio.ensure_future(self.closed.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
