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
from claw_train.checkpoints import checkpoint_step
from claw_train.config import PipelineArgs, TrainArgs, as_flat_dict
from claw_train.families import env_kwargs_for, spec_for, tasks_for
from claw_train.judging import SampleMaker
from claw_train.logs import VersionedLog
from claw_train.metrics import TRAINER_COUNTERS, Counters, Stats
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.cluster import episode_runner, join_cluster, worker_policy
from claw_train.pipeline.control import RunControl
from claw_train.pipeline.episodes import EpisodeRunner
from claw_train.pipeline.evaluations import EvalSchedule, Evaluations
from claw_train.pipeline.failures import FailureMonitor
from claw_train.pipeline.guards import first_failure, stop_on_signals, watch_for_signal
from claw_train.pipeline.judge_workers import JudgeWorkers
from claw_train.pipeline.parts import PipelineResult, RunParts, TurnSource
from claw_train.pipeline.ranks import RankLink
from claw_train.pipeline.reporting import success_name, write_summary
from claw_train.pipeline.rollouts import EnvRollouts, RolloutShape, SyncRounds, in_flight_budget
from claw_train.pipeline.rundir import RunDir, RunError
from claw_train.pipeline.trainer_thread import TrainerSetup, TrainerThread
from claw_train.pipeline.turns import TurnQueue
from claw_train.pipeline.workers import RolloutWorkers
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.policy.guarded import GuardedPolicy, PolicyDown
from claw_train.records import TrainSample
from judges.base import Judge


class Pipeline:
    """One online training run over resolved options (:func:`claw_train.config.resolve`).

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
        self.log: VersionedLog | None = None  # the run's per-version logs (open while it runs)
        self.trainer: TrainerThread | None = None
        self.budget: InFlightBudget | None = None
        self._runner: EpisodeRunner | None = None
        self._policy: GuardedPolicy | None = None
        self._judge: Judge | None = None
        self._evaluations: Evaluations | None = None
        self._evals: list[dict[str, Any]] = []

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
        if self.trainer is not None and self.trainer.trainer is not None:
            snap["trainer"] = self.drops.as_dict()
        if self._judge is not None:
            snap["judge"] = self._judge.metrics_dict()
        if self.budget is not None:
            snap["in_flight"] = self.budget.books()
        return snap

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
        try:
            policy, judge, train_tasks = await self._load_parts(log)
            if resume_from is None:
                self.control.served.set()
            maker = SampleMaker(
                settings=MethodSettings(
                    self.training.method, self.training.w_rl, self.training.w_opd, self.training.prm_c
                ),
                judge=judge,
                policy=policy,
                stats=self.stats,
                log=log,
                attempt=attempt,
                temperature=self.rollout.temperature,
                fatal=lambda err: isinstance(err, PolicyDown),
            )
            judges = JudgeWorkers(
                maker, turns=self.turns, samples=self.samples, control=self.control, stats=self.stats, say=self.say
            )
            trainer_done: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
            if self.train:
                self.trainer = self._trainer_thread(log, policy, judge)
                self.trainer.start(self._model_path or self.run_cfg.model, resume_from, trainer_done)
            else:
                waiter = asyncio.ensure_future(self.control.closed.wait())  # serving only: done when closed
                waiter.add_done_callback(lambda _: trainer_done.done() or trainer_done.set_result(("stopped",) * 2))
            tasks += self._start_workers(log, policy, judges, train_tasks, rng, attempt)
            watch = asyncio.ensure_future(first_failure(tasks))
            done, _ = await asyncio.wait({trainer_done, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and trainer_done not in done:
                err = watch.result()
                self.request_stop("error", f"a worker failed: {type(err).__name__}: {err}")
                await trainer_done
            status, message = trainer_done.result()
            if self.trainer is not None:
                await self.trainer.join()
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
            await self._close_parts(log)
        if self.control.stop_reason is not None and status in ("done", "stopped"):
            status, message = self.control.stop_reason
        if status == "stopped":
            status = "interrupted"
        return self._result(status, message, started)

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
        self.log = VersionedLog(self.out / "logs")
        return resume_from, self.log, np.random.default_rng([self.run_cfg.seed, attempt]), attempt

    async def _load_parts(self, log: VersionedLog) -> tuple[GuardedPolicy, Judge, TaskSource | None]:
        """The policy, the judge and the training tasks (agent groups draw theirs; the personal track's envs take
        ``--tasks`` if given), each checked before anything runs."""
        await asyncio.to_thread(join_cluster, self.rollout)  # an unreachable --ray-address fails before any model
        self.stats.set_status("loading the policy")
        tasks = None
        if self.rollout.tasks is not None or not self.personal:
            tasks = tasks_for(self.spec, self.rollout.tasks, "train")
        if self._model_path is None:
            self._model_path = await asyncio.to_thread(self._resolve_model)
        policy = self._policy = GuardedPolicy(self._given_policy or await asyncio.to_thread(self._load_policy))
        try:
            judge = self._judge = self._given_judge or self._make_judge(policy)
        except ValueError as err:
            raise RunError(f"--judge {self.training.judge}: {err}") from None
        if problem := await judge.reachable():
            raise RunError(f"--judge {self.training.judge}: {problem}")
        remote = self.run_cfg.policy != "inprocess" and self._given_policy is None
        if remote and not await policy.healthy():
            raise RunError(f"--policy {self.run_cfg.policy}: the server does not answer a one-token request")
        if isinstance(self.args, TrainArgs):
            schedule = EvalSchedule(self.args.eval_every or 0, tuple(self.args.eval_at))
            self._evaluations = Evaluations(
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
        return policy, judge, tasks

    def _resolve_model(self) -> str:
        from claw_train.policy.loader import resolve_model

        cfg = self.run_cfg
        return resolve_model(cfg.model, family=self.spec.name, progress=False, say=self.say, warm_start=cfg.warm_start)

    def _load_policy(self) -> Policy:
        from claw_train.policy.loader import load_policy

        model = self._model_path if self.run_cfg.policy == "inprocess" else self.run_cfg.model
        return load_policy(
            model, self.run_cfg.policy, family=self.spec.name, progress=False, retries=self.training.policy_retries
        )

    def _make_judge(self, policy: GuardedPolicy) -> Judge:
        from claw_train.yaml_text import option_values
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
        self, log: VersionedLog | None, policy: GuardedPolicy | None, judge: Judge | None
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
            evaluations=self._evaluations,
            say=self.say,
        )

    def _start_workers(
        self,
        log: VersionedLog,
        policy: GuardedPolicy,
        judges: JudgeWorkers,
        tasks: TaskSource | None,
        rng: np.random.Generator,
        attempt: int,
    ) -> list[asyncio.Task]:
        """The turn source (env rollouts, unless one was given), the judge workers and the signal watch."""
        if self._source is not None:
            parts = RunParts(
                self.control, self.stats, log, policy, self.sampling, self.turns, self.spec, self.train, self.snapshot
            )
            started = self._source(parts).start()
        else:
            started = self._rollouts(policy, judges, tasks, rng, attempt).start()
        if self.train and not self.sync:
            started += judges.start(self.training.judge_workers)
        limit = self.training.max_wait_for_signal
        if self.train and self._runner is not None and limit > 0:
            started.append(asyncio.create_task(watch_for_signal(self.control, self.stats, limit)))
        return started

    def _rollouts(
        self,
        policy: GuardedPolicy,
        judges: JudgeWorkers,
        tasks: TaskSource | None,
        rng: np.random.Generator,
        attempt: int,
    ) -> TurnSource:
        """Env rollouts (or sync rounds) on the run's episode runner."""
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
        self._runner = episode_runner(self.spec.env_id, size, kwargs, self.rollout, policy, workers)
        if isinstance(self._runner, RolloutWorkers):
            self.say(f"rollouts: up to {size} rollout workers (env + policy client) on the Ray cluster")
        if not self.sync:
            lone_turns = self.personal and not isinstance(self._runner, RolloutWorkers)  # else whole episodes
            self.budget = in_flight_budget(self.training, self.rollout, self.spec, lone_turns=lone_turns)
        self.stats.set_status("running (sync)" if self.sync else "running")
        shape = RolloutShape(self.personal, self.training.group_size or 1, self.rollout.rollout_workers, attempt)
        rollouts = EnvRollouts(
            self._runner,
            shape,
            turns=self.turns,
            control=self.control,
            failures=FailureMonitor(self.control, self.stats, self.rollout.max_idle_episodes),
            stats=self.stats,
            sampling=self.sampling,
            rng=rng,
            tasks=tasks,
            budget=self.budget,
        )
        if not self.sync:
            return rollouts
        return SyncRounds(
            rollouts,
            judges.judge,
            samples=self.samples,
            samples_per_step=self.training.samples_per_step,
            max_staleness=self.training.max_staleness,
            drops=self.drops,
        )

    async def _close_parts(self, log: VersionedLog) -> None:
        """Close the runner, the judge and the policy; what is still queued gives its in-flight slots back."""
        self.turns.drain()
        while not self.samples.empty():
            self.samples.get_nowait().turn.release_slot()
        policy = self._policy.inner if self._policy is not None else self._given_policy
        for part in (self._runner, self._judge, policy):
            if part is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(part.aclose(), 60)
        log.close()

    def _result(self, status: str, message: str, started: float) -> PipelineResult:
        """The run's result, also written as ``summary.json`` with the learning curve."""
        evals = list(self._evaluations.rows if self._evaluations is not None else self._evals)
        checkpoint = self.trainer.checkpoint if self.trainer is not None else None
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
        self.trainer = self._trainer_thread(None, None, None)
        if word.error is not None or word.model_path is None:
            status, message = "error", f"rank 0 stopped before training: {word.error}"
        else:
            self.stats.set_status(f"rank {rank}: training on its share of rank 0's samples")
            status, message = await asyncio.to_thread(self.trainer.follow, word.model_path, word.resume_from)
        return PipelineResult(
            status=status,
            message=f"rank {rank}: {message}",
            updates=self.trainer.step,
            wall_time=time.monotonic() - started,
            evals=[],
            counters={},
            output_dir=self.out,
            checkpoint=self.trainer.checkpoint,
        )
