"""The online learning pipeline: four loops joined by bounded queues.

::

    policy serving ──► rollout workers ──turns──► judge workers ──samples──► trainer
         ▲  (its own worker thread)    (asyncio)        (PRM + hint, asyncio)   (a thread: blocking torch)
         └──────────────────────── weights after every optimizer step ◄───────┘

* **Serving** is the policy backend (``inprocess``: a worker thread over a serving copy of the weights;
  ``sglang``: HTTP). It never stops: new weights are swapped in between requests.
* **Rollout workers** play episodes through the env pool and put each finished turn (token-exact,
  with its behaviour log-probs and policy version) on the turn queue. The personal track
  (conversation) streams turns one by one; general agents (tool call, terminal, …) roll out ``G``
  episodes of one task and hand the whole group over, since step-index normalisation needs it.
* **Judge workers** ask the PRM and the hint judge at once, compute the OPD teacher log-probs (the
  same policy, prompt = the chat with the hint appended to the last user message) and the
  advantages of the method (:mod:`claw_train.advantages`), and put ready samples on the sample queue.
  Turns that carry no gradient (PRM 0 and no hint), infrastructure failures and steps the judge could
  not judge are masked and counted.
* **Trainer**: :class:`~claw_train.trainer.ClawTrainer` in a thread, pulling ``samples_per_step``
  samples per optimizer step and publishing weights after each.

Queues are bounded, so a slow consumer holds its producers back (backpressure) and an empty queue
is waited on, never polled. ``sync=True`` runs the same parts one after another (roll out, judge,
train) for comparison. Bad input: a judge that is down (its steps are masked and counted; training
goes on with what there is), a policy that dies (retries, then a clear stop with a checkpoint), a NaN
loss (the step is skipped and logged), Ctrl-C or SIGTERM (checkpoint, then a clean exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import math
import signal
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from claw_train.advantages import METHODS
from claw_train.judging import SampleMaker
from claw_train.logs import Ledger, VersionedLog
from claw_train.metrics import Stats
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.records import TrainSample, TurnRecord
from claw_train.rollout import EpisodeAgent

PERSONAL_FAMILIES = ("conversation",)


@dataclass
class PipelineConfig:
    """Everything one ``claw-train`` run needs (the CLI fills it; ``trainer`` holds ClawConfig overrides)."""

    env: str = "conversation"
    method: str = "combined"
    model: str = "tiny"
    policy: str = "inprocess"
    judge: str = "rules"
    updates: int = 16
    output_dir: Path = Path("runs/claw")
    resume: bool = False
    lora: bool = False
    sync: bool = False
    eval_every: int = 4
    eval_at: tuple[int, ...] = ()  # evaluate exactly at these updates instead of every ``eval_every``
    eval_n: int = 32
    eval_seed: int = 1234
    persona: str = "student"
    seed: int = 0
    temperature: float = 1.0
    max_new_tokens: int = 160
    samples_per_step: int = 16
    rollout_workers: int = 4
    judge_workers: int = 8
    group_size: int = 4
    votes: int = 3
    w_rl: float = 1.0
    w_opd: float = 1.0
    prm_c: float = 1.0
    max_staleness: int = 2
    in_flight_batches: int = 1  # async: turns generated but not yet trained, in batches of samples_per_step
    checkpoint_every: int = 4
    policy_retries: int = 3
    retry_backoff: float = 0.5
    max_turns: int | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    judge_options: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    report_to: str = "tensorboard"

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)
        self.eval_at = tuple(int(u) for u in self.eval_at)
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {self.method!r}")
        for name in ("updates", "samples_per_step", "rollout_workers", "judge_workers", "group_size", "votes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.eval_every < 0 or self.checkpoint_every < 1:
            raise ValueError("eval_every must be >= 0 and checkpoint_every >= 1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for training (log-probs need it), got {self.temperature}")


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
        return {"done": 0, "interrupted": 130}.get(self.status, 1)


class PolicyDown(PolicyError):
    """The policy kept failing through every retry and a health probe: stop the run."""


class RunError(Exception):
    """A run that cannot start (bad output dir, nothing to resume, unknown env): said clearly."""


class _RetryingPolicy(Policy):
    """Retries ``generate``/``logprobs`` with backoff; after the last retry a health probe decides between
    a bad request (re-raised as ``PolicyError``) and a dead policy (:class:`PolicyDown`)."""

    def __init__(self, inner: Policy, retries: int, backoff: float):
        self.inner = inner
        self.retries = retries
        self.backoff = backoff
        self.tokenizer = getattr(inner, "tokenizer", None)
        self.failures = 0

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.inner.version

    async def _call(self, make: Callable[[], Awaitable[Any]]) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return await make()
            except PolicyError as err:
                self.failures += 1
                last = err
                if attempt < self.retries:
                    await asyncio.sleep(self.backoff * 2**attempt)
        if not await self._healthy():
            raise PolicyDown(f"the policy failed {self.retries + 1} times and a health probe failed: {last}")
        raise last

    async def _healthy(self) -> bool:
        try:
            await self.inner.generate([0], SamplingParams(max_new_tokens=1))
        except PolicyError:
            return False
        return True

    async def generate(self, prompt: Any, sampling: SamplingParams) -> Any:
        return await self._call(lambda: self.inner.generate(prompt, sampling))

    async def logprobs(self, prompt_ids: Any, completion_ids: Any, **kw: Any) -> list[float]:
        return await self._call(lambda: self.inner.logprobs(prompt_ids, completion_ids, **kw))


class _StreamingAgent(EpisodeAgent):
    """An ``EpisodeAgent`` that hands each turn on as soon as the env has answered it."""

    def __init__(
        self,
        *args: Any,
        emit: Callable[[TurnRecord], Awaitable[None]],
        gate: asyncio.Semaphore | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.emit = emit
        self.gate = gate
        self.emitted = 0
        self.error: PolicyError | None = None

    async def flush(self) -> None:
        while self.emitted < len(self.turns):
            turn = self.turns[self.emitted]
            turn.info.setdefault("tools", self.transcript.tools if self.transcript else None)
            self.emitted += 1
            await self.emit(turn)

    async def __call__(self, obs: Any, info: Mapping[str, Any]) -> str:
        if self.transcript is not None:
            self.observe(0.0, info)
            await self.flush()
        if self.gate is not None:
            await self.gate.acquire()  # a slot in the in-flight budget; freed when the turn is trained or masked
        try:
            return await super().__call__(obs, info)
        except PolicyError as err:
            if self.gate is not None:
                self.gate.release()
            self.error = err
            raise


class _SampleFeed:
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
        if self.loop.is_closed():
            return None
        return asyncio.run_coroutine_threadsafe(self._get(), self.loop).result()


class Pipeline:
    """One online training run (see the module docstring).

    ``policy``/``judge`` may be injected (tests); ``model_path`` is ``cfg.model`` already resolved (e.g. the
    bootstrapped tiny model's directory, so a caller can show the bootstrap's progress).
    """

    def __init__(
        self,
        cfg: PipelineConfig,
        *,
        policy: Policy | None = None,
        judge: Any = None,
        model_path: str | None = None,
        on_message: Callable[[str], None] | None = None,
    ):
        import claw_envs

        self.cfg = cfg
        try:
            self.env_id = claw_envs.resolve_id(cfg.env)
        except KeyError as err:
            raise RunError(str(err.args[0])) from None
        self.env_cls = claw_envs.env_class(self.env_id)
        self.family = self.env_cls.family
        self.personal = self.family in PERSONAL_FAMILIES
        self.out = cfg.output_dir
        self.stats = Stats()
        self.say = on_message or (lambda text: None)
        self._policy_arg = policy
        self._model_path = model_path
        self._judge_arg = judge
        self.evals: list[dict[str, Any]] = []
        self._stop_reason: tuple[str, str] | None = None
        self._episode_no = 0
        self.trainer: Any = None
        self.judge: Any = None
        self.turn_q: asyncio.Queue[Any] | None = None
        self.sample_q: asyncio.Queue[TrainSample] | None = None
        self.checkpoint: Path | None = None
        self._in_flight: asyncio.Semaphore | None = None
        self._group_gate = asyncio.Lock()  # one group at a time takes its allotment of in-flight slots

    # -- public -----------------------------------------------------------------------------

    def request_stop(self, status: str, message: str) -> None:
        """Stop the run (first reason wins): rollouts end, the trainer checkpoints and returns."""
        if self._stop_reason is None:
            self._stop_reason = (status, message)
            self.stats.status = f"stopping: {message}"
            self.say(f"stopping: {message}")
        if hasattr(self, "_closed"):
            self._loop.call_soon_threadsafe(self._closed.set)

    def snapshot(self) -> dict[str, Any]:
        """What the live display shows."""
        snap = self.stats.snapshot()
        if self.turn_q is not None and self.sample_q is not None:
            snap["turn_queue"] = self.turn_q.qsize()
            snap["sample_queue"] = self.sample_q.qsize()
        snap["samples_per_second"] = self.stats.samples_per_second()
        snap["updates"] = self.trainer.state.global_step if self.trainer is not None else 0
        snap["target"] = self.cfg.updates
        if self.trainer is not None:
            snap["trainer"] = dict(self.trainer.counters)
        if self.judge is not None and hasattr(self.judge, "metrics_dict"):
            snap["judge"] = self.judge.metrics_dict()
        return snap

    async def run(self) -> PipelineResult:
        """Run to ``updates`` optimizer steps (or until stopped); always leaves a checkpoint and the logs."""
        started = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()
        resume_from = self._prepare_output_dir()
        self.attempt = self.ledger.attempts() + (1 if resume_from else 0)
        if resume_from is not None:
            step = _checkpoint_step(resume_from)
            self.ledger.resume(step, self.attempt)
            self.evals = [e for e in _read_jsonl(self.out / "evals.jsonl") if e["update"] <= step]
        self.log = VersionedLog(self.out / "logs")
        self._rng = np.random.default_rng([self.cfg.seed, self.attempt])
        restore_signals = self._install_stop_signals()
        tasks: list[asyncio.Task] = []
        try:
            self.stats.status = "loading the policy"
            self.model_path = self._model_path or await asyncio.to_thread(self._resolve_model)
            self.policy = _RetryingPolicy(
                self._policy_arg or await asyncio.to_thread(self._load_policy),
                self.cfg.policy_retries,
                self.cfg.retry_backoff,
            )
            try:
                self.judge = self._judge_arg or self._make_judge()
            except ValueError as err:
                raise RunError(f"--judge {self.cfg.judge}: {err}") from None
            self.samples = SampleMaker(
                method=self.cfg.method,
                judge=self.judge,
                policy=self.policy,
                stats=self.stats,
                log=self.log,
                attempt=self.attempt,
                w_rl=self.cfg.w_rl,
                w_opd=self.cfg.w_opd,
                prm_c=self.cfg.prm_c,
                temperature=self.cfg.temperature,
                fatal=lambda err: isinstance(err, PolicyDown),
            )
            self.sampling = SamplingParams(max_new_tokens=self.cfg.max_new_tokens, temperature=self.cfg.temperature)
            size = self.cfg.samples_per_step  # small queues keep samples fresh (staleness) and the CPU for training
            self.turn_q = asyncio.Queue(size if self.personal else max(1, self.cfg.rollout_workers))
            self.sample_q = asyncio.Queue(size)
            # at most this many turns between generation and training, so samples stay within max_staleness
            # versions (async only: sync mode runs the phases in turn)
            self._in_flight = self._make_gate()
            self._served = asyncio.Event()  # the trainer's weights are serving (resume: the checkpoint's)
            if resume_from is None:
                self._served.set()
            trainer_done: asyncio.Future[tuple[str, str]] = self._loop.create_future()
            thread = self._start_trainer(resume_from, trainer_done)
            tasks += self._start_workers()
            watch = asyncio.ensure_future(_first_failure(tasks))
            done, _ = await asyncio.wait({trainer_done, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and trainer_done not in done:
                err = watch.result()
                self.request_stop("error", f"a worker failed: {type(err).__name__}: {err}")
                await trainer_done
            status, message = trainer_done.result()
            if thread is not None:
                await asyncio.to_thread(thread.join)
        except RunError:
            raise
        except PolicyError as err:
            status, message = "policy_failed", f"the policy could not start: {err}"
        finally:
            restore_signals()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close_parts()
            self.log.close()
        if self._stop_reason is not None and status in ("done", "stopped"):
            status, message = self._stop_reason
        if status == "stopped":
            status = "interrupted"
        result = PipelineResult(
            status=status,
            message=message,
            updates=self.trainer.state.global_step if self.trainer is not None else 0,
            wall_time=time.monotonic() - started,
            evals=list(self.evals),
            counters=self.snapshot(),
            output_dir=self.out,
            checkpoint=self.checkpoint,
        )
        self._write_summary(result)
        return result

    # -- setup ------------------------------------------------------------------------------

    def _prepare_output_dir(self) -> Path | None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.out / "ledger.jsonl")
        ckpts = self.out / "checkpoints"
        last = last_checkpoint(ckpts)
        if self.cfg.resume:
            if last is None:
                raise RunError(f"--resume: no checkpoint under {ckpts} to continue from")
            saved = _read_json(self.out / "run.json")
            for key in ("env", "method", "model", "lora"):
                if saved and saved.get(key) != getattr(self.cfg, key):
                    raise RunError(
                        f"--resume: this run was started with {key}={saved.get(key)!r}, not {getattr(self.cfg, key)!r}"
                    )
            return Path(last)
        if last is not None or self.ledger.records():
            raise RunError(
                f"{self.out} already holds a run; pass --resume to continue it or choose another --output-dir"
            )
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self.cfg).items()}
        (self.out / "run.json").write_text(json.dumps(config, indent=2, default=str))
        return None

    def _resolve_model(self) -> str:
        from claw_train.policy.loader import resolve_model

        return resolve_model(self.cfg.model, family=self.family, progress=False)

    def _load_policy(self) -> Policy:
        from claw_train.policy.loader import load_policy

        model = self.model_path if self.cfg.policy == "inprocess" else self.cfg.model
        return load_policy(model, self.cfg.policy, family=self.family, progress=False)

    def _make_judge(self) -> Any:
        from judges import make_judge

        return make_judge(
            self.cfg.judge,
            family=self.family,
            votes=self.cfg.votes,
            policy=self.policy.inner if self.cfg.judge == "policy" else None,
            hints=self.cfg.method != "binary",
            **self.cfg.judge_options,
        )

    def _env_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.cfg.env_kwargs)
        if self.personal:
            kwargs.setdefault("persona", self.cfg.persona)
        if self.cfg.max_turns is not None:
            kwargs.setdefault("max_turns", self.cfg.max_turns)
        return kwargs

    def _make_gate(self) -> asyncio.Semaphore | None:
        """The in-flight budget (async only: sync mode runs the phases in turn); for grouped rollouts at least one
        whole group's allotment, so a group that has its slots can always finish."""
        if self.cfg.sync:
            return None
        limit = self._in_flight_limit()
        return asyncio.Semaphore(limit if self.personal else max(limit, self._group_allotment()))

    def _group_allotment(self) -> int:
        """Slots a group takes up front: every episode may run to the turn limit."""
        max_turns = self.cfg.max_turns or self._env_kwargs().get("max_turns") or self.env_cls.default_max_turns
        return self.cfg.group_size * int(max_turns)

    def _start_trainer(self, resume_from: Path | None, done: asyncio.Future) -> threading.Thread | None:
        """Start the trainer thread; it resolves ``done`` with ``(status, message)`` when it returns."""
        thread = threading.Thread(target=self._trainer_main, args=(resume_from, done), name="claw-trainer", daemon=True)
        thread.start()
        return thread

    def _start_workers(self) -> list[asyncio.Task]:
        """The env pool, the rollout workers and the judge workers (or the sync driver)."""
        from claw_envs.pool import EnvPool

        self.pool = EnvPool(self.env_id, self._pool_size(), env_kwargs=self._env_kwargs())
        self.stats.status = "running (sync)" if self.cfg.sync else "running"
        if self.cfg.sync:
            return [asyncio.create_task(self._sync_driver())]
        tasks = [asyncio.create_task(self._rollout_worker(i)) for i in range(self.cfg.rollout_workers)]
        return tasks + [asyncio.create_task(self._judge_worker()) for _ in range(self.cfg.judge_workers)]

    def _in_flight_limit(self) -> int:
        return self.cfg.samples_per_step * self.cfg.in_flight_batches

    def _pool_size(self) -> int:
        per_worker = 1 if self.personal else self.cfg.group_size
        return self.cfg.rollout_workers * per_worker

    def _install_stop_signals(self) -> Callable[[], None]:
        """Ctrl-C and SIGTERM (a supervisor stopping the run) both checkpoint, then stop; returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        names = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
        try:
            for sig, name in names.items():
                self._loop.add_signal_handler(
                    sig, functools.partial(self.request_stop, "interrupted", f"{name}: checkpointing, then exiting")
                )
        except (NotImplementedError, RuntimeError):
            return lambda: None

        def restore() -> None:
            for sig in names:
                self._loop.remove_signal_handler(sig)

        return restore

    async def _close_parts(self) -> None:
        for name in ("pool", "judge", "policy"):
            part = getattr(self, name, None)
            if part is None:
                continue
            closer = getattr(part.inner if name == "policy" else part, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closer(), 60)

    # -- rollouts ---------------------------------------------------------------------------

    def _next_seed(self) -> int:
        self._episode_no += 1
        return int(self._rng.integers(0, 2**31 - 1))

    async def _play(self, emit: Callable[[TurnRecord], Awaitable[None]], *, group: str = "", options=None) -> int:
        """One episode through the pool; each turn goes to ``emit``. Returns the number of turns.

        A lone episode takes an in-flight slot per turn; the episodes of a group play on their group's allotment.
        """
        seed = self._next_seed()
        gate = None if group else self._in_flight
        agent = _StreamingAgent(
            self.policy, self.sampling, group_id=group or f"ep{self.attempt}-{seed}", emit=emit, gate=gate
        )
        result = await self.pool.run_episode(agent, seed=seed, options=options)
        if agent.error is not None:
            if isinstance(agent.error, PolicyDown):
                self.request_stop("policy_failed", str(agent.error))
            else:
                self.stats.add("generation_errors")
            return len(agent.turns)
        if agent.pending:
            if len(result.infos) == len(result.actions) + 1:  # the reset info, then one per step
                agent.observe(result.rewards[-1] if result.rewards else 0.0, result.infos[-1])
            else:  # the env never answered this action (timeout, crash): recorded, then masked as infra
                agent.abandon(result.status if result.status != "ok" else "infra_failure")
        await agent.flush()
        self.stats.add("episodes")
        if result.status != "ok":
            self.stats.add(f"episodes_{result.status}")
        return len(agent.turns)

    async def _rollout_worker(self, index: int) -> None:
        await self._served.wait()
        while not self._closed.is_set():
            if self.personal:
                await self._play(self._put_turn)
            else:
                await self._put_turn(await self._play_group())

    async def _put_turn(self, item: Any) -> None:
        self.stats.add("turns", len(item) if isinstance(item, list) else 1)
        await self.turn_q.put(item)

    async def _play_group(self) -> list[list[TurnRecord]]:
        """``group_size`` episodes of one task (its group for step-index normalisation)."""
        if not hasattr(self, "_tasks"):
            self._tasks = self.env_cls.default_tasks("train")
        task = self._tasks.sample(self._rng)
        group = f"g{self.attempt}-{self._episode_no}-{task.id}"
        episodes: list[list[TurnRecord]] = [[] for _ in range(self.cfg.group_size)]

        def collector(k: int) -> Callable[[TurnRecord], Awaitable[None]]:
            async def emit(turn: TurnRecord) -> None:
                episodes[k].append(turn)

            return emit

        options = {"task_id": task.id}
        allotment = await self._take_allotment()
        try:
            await asyncio.gather(
                *(self._play(collector(k), group=group, options=options) for k in range(len(episodes)))
            )
        finally:  # the group's turns hold their slots until trained or masked; the rest are free now
            self._free(allotment - sum(len(e) for e in episodes))
        return [e for e in episodes if e]

    async def _take_allotment(self) -> int:
        """Take a whole group's slots at once (one group at a time), so no two groups each hold part of the budget
        while neither can finish: a group is judged only when all its episodes have ended."""
        if self._in_flight is None:
            return 0
        allotment = self._group_allotment()
        async with self._group_gate:
            for _ in range(allotment):
                await self._in_flight.acquire()
        return allotment

    # -- judging ----------------------------------------------------------------------------

    async def _judge_worker(self) -> None:
        while True:
            item = await self.turn_q.get()
            try:
                samples = await self._judge(item)
            except PolicyDown as err:  # the teacher prefill found the policy dead
                self.request_stop("policy_failed", str(err))
                return
            turns = sum(len(ep) for ep in item) if isinstance(item, list) else 1
            self._free(turns - len(samples))  # masked turns leave the in-flight budget now
            self._warn_if_starved()
            for sample in samples:
                await self.sample_q.put(sample)

    def _warn_if_starved(self) -> None:
        """Say so when many turns in a row were masked: training waits for signal, it has not hung."""
        snap = self.stats.snapshot()
        masked, samples = snap["counts"].get("masked", 0), snap["counts"].get("samples", 0)
        if samples == 0 and masked in (100, 1000, 10000):
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(snap["masked"].items()))
            self.say(f"no trainable sample yet after {masked} turns (masked: {reasons}); training waits for signal")

    def _free(self, n: int) -> None:
        if self._in_flight is not None:
            for _ in range(max(0, n)):
                self._in_flight.release()

    def _judge(self, item: TurnRecord | list[list[TurnRecord]]) -> Awaitable[list[TrainSample]]:
        return self.samples.group(item) if isinstance(item, list) else self.samples.personal(item)

    # -- sync mode --------------------------------------------------------------------------

    async def _sync_driver(self) -> None:
        """Roll out, then judge, then train — one after another, never overlapping."""
        await self._served.wait()
        pending: list[TrainSample] = []
        items: list[Any] = []

        async def collect(item: Any) -> None:
            items.append(item)
            self.stats.add("turns", len(item) if isinstance(item, list) else 1)

        while not self._closed.is_set():
            items.clear()
            if self.personal:
                await asyncio.gather(*(self._play(collect) for _ in range(self.cfg.rollout_workers)))
            else:
                groups = await asyncio.gather(*(self._play_group() for _ in range(self.cfg.rollout_workers)))
                for g in groups:
                    await collect(g)
            try:
                judged = await asyncio.gather(*(self._judge(i) for i in items))
            except PolicyDown as err:
                self.request_stop("policy_failed", str(err))
                return
            pending += [s for batch in judged for s in batch]
            while len(pending) >= self.cfg.samples_per_step and not self._closed.is_set():
                step = self.trainer_step()
                pending = self._drop_untrainable(pending, step)
                if len(pending) < self.cfg.samples_per_step:
                    break
                for s in pending[: self.cfg.samples_per_step]:
                    await self.sample_q.put(s)
                pending = pending[self.cfg.samples_per_step :]
                await self._wait_step(step + 1)

    def _drop_untrainable(self, pending: list[TrainSample], step: int) -> list[TrainSample]:
        """The samples the trainer will take at ``step``, counting the rest where the trainer counts its own drops.

        Sync mode hands the trainer exactly one batch and waits for the step; a sample it would drop (too
        stale after the previous batches of a long round, or malformed) would leave it waiting forever.
        """
        keep = []
        for s in pending:
            verdict = self.trainer.triage(s, step)
            if verdict is None:
                keep.append(s)
            else:
                self.trainer.count(f"{verdict}_dropped")
        return keep

    def trainer_step(self) -> int:
        return self.trainer.state.global_step if self.trainer is not None else 0

    async def _wait_step(self, step: int) -> None:
        """Wait (no polling) until the trainer has made optimizer step ``step`` or the run stops."""
        while True:
            event = self._step_event = asyncio.Event()
            if self.trainer_step() >= step or self._closed.is_set():
                return
            waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._closed.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()

    # -- trainer thread ---------------------------------------------------------------------

    def _trainer_main(self, resume_from: Path | None, done: asyncio.Future) -> None:
        def finish(status: str, message: str) -> None:
            self._loop.call_soon_threadsafe(lambda: done.done() or done.set_result((status, message)))

        try:
            self.trainer = self._build_trainer()
            self.stats.status = "training"
            self.trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        except Exception as err:
            from claw_train.trainer import FeedClosed

            if not isinstance(err, FeedClosed):
                self.request_stop("error", f"trainer failed: {type(err).__name__}: {err}")
            self._save_checkpoint()
            status, message = self._stop_reason or ("stopped", "stopped")
            finish(status, message)
            return
        self._save_checkpoint()
        self.request_stop("done", f"finished {self.trainer.state.global_step} updates")
        finish("done", f"finished {self.trainer.state.global_step} updates")

    def _build_trainer(self) -> Any:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from claw_train.trainer import ClawConfig, ClawTrainer, WeightPublisher

        overrides = {
            "method": self.cfg.method,
            "w_rl": self.cfg.w_rl,
            "w_opd": self.cfg.w_opd,
            "prm_c": self.cfg.prm_c,
            "max_staleness": self.cfg.max_staleness,
            "samples_per_step": self.cfg.samples_per_step,
            "per_device_train_batch_size": self.cfg.samples_per_step,
            "temperature": self.cfg.temperature,
            "max_steps": self.cfg.updates,
            "save_steps": self.cfg.checkpoint_every,
            "report_to": self.cfg.report_to,
            "seed": self.cfg.seed,
            **self.cfg.trainer,
        }
        model_spec = "tiny" if self.cfg.model == "tiny" else self.model_path
        args = ClawConfig.for_model(model_spec, self.out / "checkpoints", **overrides)
        dtype = torch.float32 if args.use_cpu else "auto"
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        peft_config = None
        if self.cfg.lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
            )
        to_disk = None if self.cfg.policy == "inprocess" else self.out / "weights"
        callbacks = [WeightPublisher(self._publish, to_disk=to_disk), _glue_callback(self)]
        feed = _SampleFeed(self.sample_q, self._loop, self._closed, on_take=lambda: self._free(1))
        return ClawTrainer(
            model, args, source=feed, processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks
        )

    def _publish(self, weights: Any, version: int) -> None:
        try:
            self.policy.inner.publish(weights, version)
        except PolicyError as err:
            self.stats.add("publish_errors")
            self.log.write(version, {"kind": "event", "event": "publish_failed", "error": str(err)})
            return
        self.stats.version = version
        self._loop.call_soon_threadsafe(self._served.set)

    def _save_checkpoint(self) -> None:
        trainer = self.trainer
        if trainer is None:
            return
        path = self.out / "checkpoints" / f"checkpoint-{trainer.state.global_step}"
        try:
            if not (path / "trainer_state.json").exists() and trainer.state.global_step > 0:
                trainer._save_checkpoint(trainer.model, trial=None)
            if path.exists():
                self.checkpoint = path
        except Exception as err:  # the run is ending anyway: say so, keep what is on disk
            self.say(f"could not save a checkpoint: {err}")

    def _on_step_end(self, trainer: Any) -> None:
        """Trainer thread, after each optimizer step: ledger, logs, stats, evaluation when due."""
        step = trainer.state.global_step
        batch = trainer.current_batch
        self.ledger.update(
            step,
            [s.sample_id for s in batch],
            dropped=[s.sample_id for s in trainer.current_dropped],
            versions=[s.turn.policy_version for s in batch],
            score_mean=_mean([s.score for s in batch if s.score is not None]),
        )
        self.stats.trained(len(batch))
        self.stats.staleness = _mean([step - 1 - s.turn.policy_version for s in batch]) or 0.0
        logs = trainer.state.log_history[-1] if trainer.state.log_history else {}
        self.log.write(
            step,
            {
                "kind": "update",
                "update": step,
                "samples": [s.sample_id for s in batch],
                "loss": logs.get("loss"),
                "nan_skipped": trainer.counters.get("nan_skipped", 0),
                "judge": self.judge.metrics_dict() if hasattr(self.judge, "metrics_dict") else None,
                "masked": dict(self.stats.masked),
            },
        )
        if getattr(self, "_step_event", None) is not None:
            self._loop.call_soon_threadsafe(self._step_event.set)
        self._maybe_evaluate(step)

    def _eval_due(self, step: int) -> bool:
        if any(e["update"] == step for e in self.evals):
            return False
        if self.cfg.eval_at:
            return step in self.cfg.eval_at
        return bool(self.cfg.eval_every) and step % self.cfg.eval_every == 0

    def _maybe_evaluate(self, step: int) -> None:
        if not self._eval_due(step):
            return
        evaluate = _evaluator(self.family)
        if evaluate is None:
            return
        self.stats.status = f"evaluating version {step}"
        future = asyncio.run_coroutine_threadsafe(evaluate(self, step), self._loop)
        try:
            row = future.result()
        except Exception as err:
            self.say(f"evaluation at update {step} failed: {type(err).__name__}: {err}")
            self.stats.status = "training"
            return
        self.evals.append(row)
        self.stats.last_eval = row
        with (self.out / "evals.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        self.log.write(step, {"kind": "eval", **row})
        self.say(
            f"update {step:>3}  personalization score {row['score']:.3f} ± {row['score_sd']:.3f}  "
            f"valid {row['valid_rate']:.0%}  correct {row['correct_rate']:.0%}"
        )
        self.stats.status = "training"

    def _write_summary(self, result: PipelineResult) -> None:
        from claw_train.plots import learning_curve

        ledger = self.ledger.effective()
        train_curve = [(u["update"], u.get("score_mean")) for u in ledger]
        try:
            learning_curve(self.out / "learning_curve.png", self.evals, train_curve, title=self._title())
        except Exception as err:  # a plot must not hide the run's result
            self.say(f"could not draw the learning curve: {err}")
        summary = {
            "status": result.status,
            "message": result.message,
            "updates": result.updates,
            "wall_time": round(result.wall_time, 1),
            "evals": result.evals,
            "counters": result.counters,
            "checkpoint": str(result.checkpoint) if result.checkpoint else None,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))

    def _title(self) -> str:
        mode = "sync" if self.cfg.sync else "async"
        return f"{self.env_id} · {self.cfg.method} · {self.cfg.model} · {mode}"


def _glue_callback(pipeline: Pipeline) -> Any:
    """The TrainerCallback that ties the trainer's steps to the pipeline (built here so that importing this
    module does not import transformers)."""
    from transformers import TrainerCallback

    class PipelineCallback(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            pipeline.stats.version = state.global_step
            pipeline.stats.train_started = time.monotonic()
            pipeline._maybe_evaluate(state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            pipeline._on_step_end(pipeline.trainer)

    return PipelineCallback()


def _evaluator(family: str) -> Callable[[Pipeline, int], Awaitable[dict[str, Any]]] | None:
    if family == "conversation":
        return _conversation_eval
    return None


async def _conversation_eval(p: Pipeline, step: int) -> dict[str, Any]:
    from claw_train.evaluation.conversation import personalization_eval

    sampling = dataclasses.replace(p.sampling, seed=p.cfg.eval_seed)
    report = await personalization_eval(
        p.policy.inner, persona=p.cfg.persona, n=p.cfg.eval_n, seed=p.cfg.eval_seed, sampling=sampling
    )
    return {
        "update": step,
        "version": p.policy.version,
        "score": report.score,
        "score_sd": report.score_sd,
        "valid_rate": report.valid_rate,
        "correct_rate": report.correct_rate,
        "n": report.n,
        "failed_generations": report.failed_generations,
        "preference_rates": report.preference_rates,
    }


async def _first_failure(tasks: list[asyncio.Task]) -> BaseException:
    """The first exception any worker raises (cancellation is not a failure); waits forever otherwise."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                return t.exception()
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None


def last_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (one a kill interrupted mid-save has no trainer state)."""
    done = [p for p in root.glob("checkpoint-*") if (p / "trainer_state.json").is_file() and p.name[11:].isdigit()]
    return max(done, key=_checkpoint_step, default=None)


def _checkpoint_step(path: Path) -> int:
    return int(path.name.rsplit("-", 1)[-1])


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
