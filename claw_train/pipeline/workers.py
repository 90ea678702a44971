"""Rollout workers on a Ray cluster: with ``--ray-address`` and a remote policy (``sglang://``) every episode is
played inside a Ray actor that holds its env and its own client of the policy servers, so generation and env
steps run on the cluster's nodes and the finished turns cross back to the trainer.

:class:`RolloutWorkers` is the trainer's side: at most ``size`` actors, each playing one episode at a time,
placed by ``--ray-resources`` (the same options as env actors: ``num_cpus``, a custom ``sandbox`` resource …).
A lone episode (personal track) takes its whole ``max_turns`` allotment of in-flight slots before it starts and
gives back what its turns did not use, so samples stay within ``max_staleness`` versions although the trainer
cannot see a turn before the episode ends. An actor that dies (its node left, or it could not start) costs its
episode, counted as an infrastructure failure, and the next episode starts a new one.

With the in-process policy the model lives in the trainer's process, so the agents that call it stay there too
and only the envs are Ray actors (:func:`~claw_train.pipeline.cluster.episode_runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from claw_envs.core import StepStatus
from claw_train.pipeline.budget import InFlightBudget
from claw_train.pipeline.episode_runner import Emit, EpisodeReport, LocalEpisodes
from claw_train.policy.base import SamplingParams
from claw_train.samples.records import TurnRecord

CLOSE_TIMEOUT = 10.0
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@functools.cache
def _actor_class() -> Any:
    """The Ray actor class of a rollout worker (built on first use so that ``ray`` stays optional)."""
    import ray

    class RolloutWorker:
        """One env and one policy client in a worker process; plays one episode per :meth:`play` call."""

        def __init__(self, spec: EnvSpec, env_kwargs: Mapping[str, Any], policy: Mapping[str, Any], timeouts: dict):
            import claw_envs  # noqa: F401  registers the built-in families (and plugins) in this process
            from claw_envs.pool import EnvPool
            from claw_train.policy.guarded import GuardedPolicy
            from claw_train.policy.loader import load_policy

            gym.registry.setdefault(spec.id, spec)  # an env registered only in the trainer's process
            self.policy = GuardedPolicy(load_policy(progress=False, **policy))
            self.episodes = LocalEpisodes(EnvPool(spec.id, 1, env_kwargs=dict(env_kwargs), **timeouts), self.policy)

        async def play(
            self, sampling: SamplingParams, seed: int, options: dict | None, group_id: str
        ) -> tuple[EpisodeReport, list[TurnRecord]]:
            turns: list[TurnRecord] = []

            async def collect(turn: TurnRecord) -> None:
                turns.append(turn)

            report = await self.episodes.play_episode(
                sampling, seed=seed, options=options, group_id=group_id, emit=collect
            )
            return report, turns

        async def close(self) -> None:
            await self.episodes.aclose()
            await self.policy.inner.aclose()

    return ray.remote(RolloutWorker)


class RolloutWorkers:
    """Up to ``size`` rollout-worker actors on the joined Ray cluster (see the module docstring).

    ``policy`` holds :func:`~claw_train.policy.loader.load_policy`'s arguments for the workers' clients (``model``,
    ``policy``, ``tokenizer_path``, ``retries``); ``actor_options`` are Ray's placement options.
    """

    def __init__(
        self,
        env_id: str,
        size: int,
        *,
        env_kwargs: Mapping[str, Any],
        policy: Mapping[str, Any],
        actor_options: Mapping[str, Any],
        step_timeout: float = 120.0,
        reset_timeout: float = 120.0,
    ):
        self.spec = gym.spec(env_id)  # an unknown id fails here, not on the cluster
        self.size = size
        self.env_kwargs = dict(env_kwargs)
        self.policy = dict(policy)
        self.actor_options = dict(actor_options)
        self.timeouts = {"step_timeout": step_timeout, "reset_timeout": reset_timeout}
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Any] = []
        self._busy: set[Any] = set()
        self.started = 0  # actors started so far (a replaced one counts again)

    def _start(self) -> Any:
        self.started += 1
        actor_cls = _actor_class().options(**self.actor_options)
        return actor_cls.remote(self.spec, self.env_kwargs, self.policy, self.timeouts)

    async def play_episode(
        self,
        sampling: SamplingParams,
        *,
        seed: int,
        options: dict[str, Any] | None,
        group_id: str,
        emit: Emit,
        budget: InFlightBudget | None = None,
    ) -> EpisodeReport:
        """One episode on a worker actor; its turns go to ``emit`` when it ends. With a ``budget`` (a lone episode)
        the episode's whole allotment of in-flight slots is taken first, one handed to each turn, the rest given
        back."""
        allotment = await budget.take_allotment() if budget is not None else None
        try:
            async with self._slots:
                report, turns = await self._on_actor(sampling, seed, options, group_id)
            for turn in turns:
                turn.hold(allotment.slot() if allotment is not None else None)
                await emit(turn)
            return report
        finally:
            if allotment is not None:
                allotment.close()

    async def _on_actor(
        self, sampling: SamplingParams, seed: int, options: dict[str, Any] | None, group_id: str
    ) -> tuple[EpisodeReport, list[TurnRecord]]:
        import ray

        actor = self._idle.pop() if self._idle else self._start()
        self._busy.add(actor)
        try:
            report, turns = await actor.play.remote(sampling, seed, options, group_id)
        except ray.exceptions.RayError as err:  # the actor died, could not start, or its episode raised
            self._busy.discard(actor)
            _kill(actor)
            why = f"the rollout worker failed ({type(err).__name__}: {_gist(err)}); a new one takes the next episode"
            return EpisodeReport(0, StepStatus.INFRA_FAILURE.value, why), []
        except BaseException:  # cancelled mid-episode: the actor cannot be trusted again
            self._busy.discard(actor)
            _kill(actor)
            raise
        self._busy.discard(actor)
        self._idle.append(actor)
        return report, turns

    async def aclose(self) -> None:
        """Close the idle actors (their envs and clients), then end every actor; safe to call twice."""
        idle, self._idle = self._idle, []
        for actor in idle:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await actor.close.remote()
        for actor in [*idle, *self._busy]:
            _kill(actor)
        self._busy.clear()


def _kill(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


def _gist(err: BaseException) -> str:
    """The first line of Ray's message and, when it carries a traceback, its last line (the original error), without
    the terminal colour codes Ray puts in."""
    text = _COLOUR.sub("", str(err))
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "no message"
    return lines[0][:300] if len(lines) == 1 else f"{lines[0][:200]} … {lines[-1][:300]}"
