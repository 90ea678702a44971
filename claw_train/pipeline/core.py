"""``Pipeline.run()``: the wiring of one online training run (see the package docstring).

The pipeline builds the run's parts and hands each what it uses; it owns none of their state. The order:
join the other ranks → prepare the run directory → load the policy and the judge → start the trainer thread,
the turn source and the judge workers → wait for the trainer (or a failed worker) → close the parts → write the
summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from claw_envs.tasks import TaskSource
from claw_train.advantages import MethodSettings
from claw_train.options.families import env_kwargs_for, spec_for, tasks_for
from claw_train.options.tree import PipelineArgs, TrainArgs, as_flat_dict
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.cluster import episode_runner, join_cluster, worker_policy
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.episode_runner import EpisodeRunner
from claw_train.pipeline.evaluations import EvalSchedule, Evaluations
from claw_train.pipeline.failures import FailureMonitor
from claw_train.pipeline.guards import first_failure, stop_on_signals, watch_for_signal
from claw_train.pipeline.judge_workers import JudgeWorkers
from claw_train.pipeline.parts import Parts, PipelineResult, RunParts, TurnSource, close_part
from claw_train.pipeline.ranks import RankLink
from claw_train.pipeline.reporting import success_name, write_summary
from claw_train.pipeline.rundir import RunDir, RunError
from claw_train.pipeline.trainer_thread import TrainerSetup, TrainerThread
from claw_train.pipeline.turn_sources import EnvRollouts, RolloutShape, SyncRounds, in_flight_budget
from claw_train.pipeline.turns import TurnQueue
from claw_train.pipeline.workers import RolloutWorkers
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.policy.guarded import GuardedPolicy, PolicyDown
from claw_train.runlog.checkpoints import checkpoint_step
from claw_train.runlog.decisions import DecisionLog
from claw_train.runlog.logs import VersionedLog
from claw_train.runlog.metrics import TRAINER_COUNTERS, Counters, Stats
from claw_train.samples.making import SampleMaker
from claw_train.samples.records import TrainSample
from judges.base import Judge


class Pipeline:
    """One online training run over resolved options (:func:`claw_train.options.resolve.resolve`).

    ``policy``/``judge`` may be injected (tests); ``model_path`` is ``--model`` already resolved (e.g. the
    bootstrapped tiny model's directory); ``source`` builds the turn source from the run's parts (default: env
    rollouts, or sync rounds with ``--sync``); ``train=False`` serves and logs without a trainer.
    """

    def __init__(
        self,
        args: PipelineArgs,
        *,
        policy: Policy | None = None,
        judge: Judge | None = None,
        model_path: str | None = None,
        on_message: Callable[[str], None] | None = None,
        source: Callable[[RunParts], TurnSource] | None = None,
        train: bool = True,
        title: str | None = None,
    ):
        self.args = args
        self.run_cfg, self.rollout, self.training = args.run, args.rollout, args.training
        self.sync = isinstance(args, TrainArgs) and args.sync
        try:
            self.spec = spec_for(args.run.env)
        except ValueError as err:
            raise RunError(str(err)) from None
        self.personal = self.spec.track == "personal"
        self.out = Path(args.run.output_dir or Path("runs") / f"{self.spec.name}-{args.training.method}")
        self.rundir = RunDir(self.out)
        self.say: Callable[[str], None] = on_message or (lambda text: None)
        self.train = train
        self.stats = Stats()
        self.control = RunControl(self.stats, self.say)
        self.drops = Counters(*TRAINER_COUNTERS)  # the trainer's (and sync mode's) drops and skips
        self.link = RankLink()  # the launcher's other processes, under accelerate launch
        queue_size = args.training.samples_per_step  # small queues keep samples fresh and the CPU for training
        self.turns = TurnQueue(queue_size if self.personal else max(1, args.rollout.rollout_workers or 1), self.stats)
        self.samples: asyncio.Queue[TrainSample] = asyncio.Queue(queue_size)
        self.sampling = SamplingParams(max_new_tokens=args.rollout.max_new_tokens, temperature=args.rollout.temperature)
        self._given_policy, self._given_judge, self._model_path = policy, judge, model_path
        self._source = source
        self._title = title
        self._evals: list[dict[str, Any]] = []  # evaluations kept from before a resume
        self._parts: Parts | None = None  # the running parts, set once, when all of them are built

    # -- public -----------------------------------------------------------------------------

    def request_stop(self, status: str, message: str) -> None:
        """Stop the run (first reason wins): rollouts end, the trainer checkpoints and returns."""
        self.control.request_stop(status, message)

    def snapshot(self) -> dict[str, Any]:
        """What the live display shows."""
        snap = self.stats.snapshot()
        snap["turn_queue"] = self.turns.qsize()
        snap["sample_queue"] = self.samples.qsize()
        snap["samples_per_second"] = self.stats.samples_per_second()
        snap["updates"] = self.control.step
        snap["target"] = self.training.updates
        parts = self._parts
        if parts is not None and parts.trainer is not None and parts.trainer.trainer is not None:
            snap["trainer"] = self.drops.as_dict()
        if parts is not None:
            snap["judge"] = parts.judge.metrics_dict()
        if parts is not None and parts.budget is not None:
            snap["in_flight"] = parts.budget.books()
        return snap

    @property
    def log(self) -> VersionedLog | None:
        """The run's per-version logs while it runs."""
        return self._parts.log if self._parts is not None else None

    def title(self) -> str:
        """The run's title: the one given, else env · method · model · sync or async."""
        mode = "sync" if self.sync else "async"
        return self._title or f"{self.spec.env_id} · {self.training.method} · {self.run_cfg.model} · {mode}"

    async def run(self) -> PipelineResult:
        """Run to ``updates`` optimizer steps (or until stopped); always leaves a checkpoint and the logs."""
        started = time.monotonic()
        self.control.bind(asyncio.get_running_loop())
        if self.train:
            options = as_flat_dict(self.args)
            await asyncio.to_thread(self.link.join, options, self.training.samples_per_step, self.say)
            if self.link.follower:
                return await self._follow(started)  # it trains on its share of rank 0's samples
        try:
            resume_from, log, rng, attempt = self._prepare()
        except RunError as err:
            await asyncio.to_thread(self.link.turn_away, str(err))
            raise
        restore_signals = stop_on_signals(self.request_stop)
        tasks: list[asyncio.Task] = []
        status, message = "error", "did not start"
        async with contextlib.AsyncExitStack() as closing:
            closing.callback(log.close)
            try:
                parts = self._parts = await self._build(log, rng, attempt, closing)
                if resume_from is None:
                    self.control.served.set()
                trainer_done: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
                if parts.trainer is not None:
                    parts.trainer.start(self._model_path or self.run_cfg.model, resume_from, trainer_done)
                else:
                    waiter = asyncio.ensure_future(self.control.closed.wait())  # serving only: done when closed
                    waiter.add_done_callback(lambda _: trainer_done.done() or trainer_done.set_result(("stopped",) * 2))
                tasks += self._start(parts)
                status, message = await self._wait(trainer_done, tasks, parts.trainer)
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
                self._drain()
        if self.control.stop_reason is not None and status in ("done", "stopped"):
            status, message = self.control.stop_reason
        if status == "stopped":
            status = "interrupted"
        return self._result(status, message, started)

    async def _wait(
        self, trainer_done: asyncio.Future[tuple[str, str]], tasks: list[asyncio.Task], trainer: TrainerThread | None
    ) -> tuple[str, str]:
        """Until the trainer is done (or a worker fails, which stops the run): how the run ended."""
        watch = asyncio.ensure_future(first_failure(tasks))
        done, _ = await asyncio.wait({trainer_done, watch}, return_when=asyncio.FIRST_COMPLETED)
        if watch in done and trainer_done not in done:
            err = watch.result()
            self.request_stop("error", f"a worker failed: {type(err).__name__}: {err}")
            await trainer_done
        if trainer is not None:
            await trainer.join()
        return trainer_done.result()

    # -- setup ------------------------------------------------------------------------------

    def _prepare(self) -> tuple[Path | None, VersionedLog, np.random.Generator, int]:
        """The run directory checked and recorded; returns the checkpoint to resume from, the log, the episodes'
        random generator and the attempt number."""
        options = as_flat_dict(self.args) | {"env": self.spec.env_id}
        resume_from = self.rundir.prepare(options, resume=self.training.resume)
        resuming = self.training.resume
        attempt = self.rundir.ledger.attempts() + (1 if resuming else 0)
        if resuming:  # from the last checkpoint, or from the start when the run was stopped before its first
            step = checkpoint_step(resume_from) if resume_from is not None else 0
            self.rundir.ledger.resume(step, attempt)
            self._evals = self.rundir.evals_until(step)
            if resume_from is None:
                self.say("--resume: no checkpoint was saved yet; training starts again from the initial weights")
        log = VersionedLog(self.out / "logs")
        return resume_from, log, np.random.default_rng([self.run_cfg.seed, attempt]), attempt

    async def _build(
        self, log: VersionedLog, rng: np.random.Generator, attempt: int, closing: contextlib.AsyncExitStack
    ) -> Parts:
        """Every part of the run, loaded and checked before any starts; each one that holds resources is closed by
        ``closing`` (the runner first, then the judge, the policy and, last, the log)."""
        await asyncio.to_thread(join_cluster, self.rollout)  # an unreachable --ray-address fails before any model
        self.stats.set_status("loading the policy")
        tasks = None
        if self.rollout.tasks is not None or not self.personal:
            tasks = tasks_for(self.spec, self.rollout.tasks, "train")
        from claw_train.policy.loader import load_policy, resolve_model

        cfg = self.run_cfg
        if self._model_path is None:
            how = {"family": self.spec.name, "progress": False, "say": self.say, "warm_start": cfg.warm_start}
            self._model_path = await asyncio.to_thread(resolve_model, cfg.model, **how)
        model = self._model_path if cfg.policy == "inprocess" else cfg.model
        how = {"family": self.spec.name, "progress": False, "retries": self.training.policy_retries}
        if cfg.policy == "inprocess":
            how["dtype"] = cfg.serve_dtype
        policy = GuardedPolicy(self._given_policy or await asyncio.to_thread(load_policy, model, cfg.policy, **how))
        closing.push_async_callback(close_part, policy.inner)
        try:
            judge = self._given_judge or self._make_judge(policy)
        except ValueError as err:
            raise RunError(f"--judge {self.training.judge}: {err}") from None
        closing.push_async_callback(close_part, judge)
        if problem := await judge.reachable():
            raise RunError(f"--judge {self.training.judge}: {problem}")
        remote = self.run_cfg.policy != "inprocess" and self._given_policy is None
        if remote and not await policy.healthy():
            raise RunError(f"--policy {self.run_cfg.policy}: the server does not answer a one-token request")
        evaluations = self._evaluations(log, policy) if isinstance(self.args, TrainArgs) else None
        settings = MethodSettings(self.training.method, self.training.w_rl, self.training.w_opd, self.training.prm_c)
        maker = SampleMaker(
            settings=settings, judge=judge, policy=policy, stats=self.stats, attempt=attempt,
            log=DecisionLog(log, settings, tokenizer=getattr(policy, "tokenizer", None)),
            temperature=self.rollout.temperature, fatal=lambda err: isinstance(err, PolicyDown),
            degenerate=self.training.degenerate,
        )  # fmt: skip
        judges = JudgeWorkers(
            maker, turns=self.turns, samples=self.samples, control=self.control, stats=self.stats, say=self.say
        )
        trainer = self._trainer_thread(log, policy, judge, evaluations) if self.train else None
        if self._source is not None:
            loaded = RunParts(
                self.control, self.stats, log, policy, self.sampling, self.turns, self.spec, self.train, self.snapshot
            )
            source, runner, budget = self._source(loaded), None, None
        else:
            source, runner, budget = self._rollouts(policy, judges, tasks, rng, attempt)
            closing.push_async_callback(close_part, runner)
        return Parts(log, policy, judge, evaluations, judges, trainer, runner, budget, source)

    def _evaluations(self, log: VersionedLog, policy: GuardedPolicy) -> Evaluations:
        """The held-out evaluations of a training run (``--eval-every``, ``--eval-at``)."""
        assert isinstance(self.args, TrainArgs)
        schedule = EvalSchedule(self.args.eval_every or 0, tuple(self.args.eval_at))
        return Evaluations(
            schedule,
            self.args.evaluation,
            spec=self.spec,
            rollout=self.rollout,
            policy=policy.inner,
            sampling=self.sampling,
            stats=self.stats,
            rundir=self.rundir,
            log=log,
            say=self.say,
            rows=self._evals,
        )

    def _make_judge(self, policy: GuardedPolicy) -> Judge:
        from claw_train.options.yaml_text import option_values
        from judges import make_judge

        return make_judge(
            self.training.judge,
            family=self.spec,
            votes=self.training.votes,
            policy=policy.inner if self.training.judge == "policy" else None,
            hints=MethodSettings(self.training.method).uses_hints,
            **option_values(self.training.judge_options),
        )

    def _trainer_thread(
        self,
        log: VersionedLog | None,
        policy: GuardedPolicy | None,
        judge: Judge | None,
        evaluations: Evaluations | None = None,
    ) -> TrainerThread:
        remote = self.run_cfg.policy != "inprocess"
        setup = TrainerSetup(
            model=self.run_cfg.model,
            training=self.training,
            spec=self.spec,
            output_dir=self.out,
            seed=self.run_cfg.seed,
            temperature=self.rollout.temperature,
            weights_dir=(self.training.publish_dir or self.out / "weights") if remote else None,
        )
        return TrainerThread(
            setup,
            control=self.control,
            samples=self.samples,
            stats=self.stats,
            drops=self.drops,
            link=self.link,
            log=log,
            ledger=self.rundir.ledger,
            policy=policy.inner if policy else None,
            judge=judge,
            evaluations=evaluations,
            say=self.say,
        )

    def _start(self, parts: Parts) -> list[asyncio.Task]:
        """The turn source, the judge workers and the signal watch."""
        started = parts.source.start()
        if self.train and not self.sync:
            started += parts.judges.start(self.training.judge_workers)
        limit = self.training.max_wait_for_signal
        if self.train and parts.runner is not None and limit > 0:
            started.append(asyncio.create_task(watch_for_signal(self.control, self.stats, limit)))
        return started

    def _rollouts(
        self,
        policy: GuardedPolicy,
        judges: JudgeWorkers,
        tasks: TaskSource | None,
        rng: np.random.Generator,
        attempt: int,
    ) -> tuple[TurnSource, EpisodeRunner, InFlightBudget | None]:
        """Env rollouts (or sync rounds) on a new episode runner, and the in-flight budget they keep."""
        per_worker = 1 if self.personal else self.training.group_size
        kwargs = env_kwargs_for(self.spec, self.rollout)
        if tasks is not None:
            kwargs.setdefault("tasks", tasks)
        size = self.rollout.rollout_workers * per_worker
        workers = worker_policy(
            policy.inner,
            self.rollout,
            model=self.run_cfg.model,
            family=self.spec.name,
            retries=self.training.policy_retries,
        )
        runner = episode_runner(self.spec.env_id, size, kwargs, self.rollout, policy, workers)
        if isinstance(runner, RolloutWorkers):
            self.say(f"rollouts: up to {size} rollout workers (env + policy client) on the Ray cluster")
        budget = None
        if not self.sync:
            lone_turns = self.personal and not isinstance(runner, RolloutWorkers)  # else whole episodes
            budget = in_flight_budget(self.training, self.rollout, self.spec, lone_turns=lone_turns)
        self.stats.set_status("running (sync)" if self.sync else "running")
        shape = RolloutShape(self.personal, self.training.group_size or 1, self.rollout.rollout_workers, attempt)
        rollouts = EnvRollouts(
            runner,
            shape,
            turns=self.turns,
            control=self.control,
            failures=FailureMonitor(self.control, self.stats, self.rollout.max_idle_episodes),
            stats=self.stats,
            sampling=self.sampling,
            rng=rng,
            tasks=tasks,
            budget=budget,
        )
        if not self.sync:
            return rollouts, runner, budget
        rounds = SyncRounds(
            rollouts,
            judges.judge,
            samples=self.samples,
            samples_per_step=self.training.samples_per_step,
            max_staleness=self.training.max_staleness,
            drops=self.drops,
        )
        return rounds, runner, budget

    def _drain(self) -> None:
        """What is still queued gives its in-flight slots back."""
        self.turns.drain()
        while not self.samples.empty():
            self.samples.get_nowait().turn.release_slot()

    def _result(self, status: str, message: str, started: float) -> PipelineResult:
        """The run's result, also written as ``summary.json`` with the learning curve."""
        parts = self._parts
        evals = list(parts.evaluations.rows if parts is not None and parts.evaluations is not None else self._evals)
        checkpoint = parts.trainer.checkpoint if parts is not None and parts.trainer is not None else None
        result = PipelineResult(
            status=status,
            message=message,
            updates=self.control.step,
            wall_time=time.monotonic() - started,
            evals=evals,
            counters=self.snapshot(),
            output_dir=self.out,
            checkpoint=checkpoint,
        )
        write_summary(
            self.rundir,
            self.stats,
            status=status,
            message=message,
            updates=result.updates,
            wall_time=result.wall_time,
            evals=evals,
            counters=result.counters,
            checkpoint=checkpoint,
            title=self.title(),
            say=self.say,
            success_name=success_name(self.spec.evaluation),
        )
        return result

    async def _follow(self, started: float) -> PipelineResult:
        """Another rank's run: wait for rank 0's word, then train on this rank's share of each step."""
        rank = self.link.ranks.rank if self.link.ranks is not None else 0
        word = await asyncio.to_thread(self.link.await_word)
        trainer = self._trainer_thread(None, None, None)
        if word.error is not None or word.model_path is None:
            status, message = "error", f"rank 0 stopped before training: {word.error}"
        else:
            self.stats.set_status(f"rank {rank}: training on its share of rank 0's samples")
            status, message = await asyncio.to_thread(trainer.follow, word.model_path, word.resume_from)
        return PipelineResult(
            status=status,
            message=f"rank {rank}: {message}",
            updates=trainer.step,
            wall_time=time.monotonic() - started,
            evals=[],
            counters={},
            output_dir=self.out,
            checkpoint=trainer.checkpoint,
        )
