"""Many episodes at once: a bounded pool of environments with per-step timeouts and cancellation.

``EnvPool(env_id, size)`` keeps at most ``size`` environments, each used by one episode at a time.
The agent (``agent(obs, info) -> action text``, usually a policy call) runs in the caller's event
loop; env steps run in the pool: ``backend="local"`` awaits the envs' own ``areset``/``astep`` in this
loop (sync-only Gymnasium envs run in a worker thread), ``backend="ray"`` keeps each env in a Ray actor
and awaits its methods. A step that overruns ``step_timeout`` is cancelled, its episode ends with
status ``"timeout"``, and that env is closed and replaced; a failing env or agent becomes an
``EpisodeResult`` with status ``"infra_failure"`` and an ``error`` instead of an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from claw_envs.core import StepStatus, coerce_action
from claw_envs.episodes import EpisodeResult

Agent = Callable[[Any, dict], Awaitable[str]]
BACKENDS = ("local", "ray")
CLOSE_TIMEOUT = 10.0
RAY_ACTOR_OPTIONS = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}  # no CPU reserved, actors spread over nodes
RAY_INIT_CPUS = 2  # only when Ray is not initialised yet; call ray.init() yourself to join a cluster


class _EnvAdapter:
    """Async reset/step/close over any Gymnasium env: its own coroutines if it has them, else a thread."""

    def __init__(self, spec: gym.envs.registration.EnvSpec, env_kwargs: Mapping[str, Any]):
        self.env = gym.make(spec, **env_kwargs).unwrapped

    async def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        if hasattr(self.env, "areset"):
            return await self.env.areset(seed=seed, options=options)
        return await asyncio.to_thread(self.env.reset, seed=seed, options=options)

    async def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        if hasattr(self.env, "astep"):
            return await self.env.astep(action)
        return await asyncio.to_thread(self.env.step, action)

    async def close(self) -> None:
        if hasattr(self.env, "aclose"):
            await self.env.aclose()
        else:
            await asyncio.to_thread(self.env.close)


class _RayEnv:
    """An env living in a Ray actor; ``kill`` ends the actor without waiting for it."""

    def __init__(self, actor: Any):
        self.actor = actor

    async def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        return await self.actor.reset.remote(seed, options)

    async def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        return await self.actor.step.remote(action)

    async def close(self) -> None:
        try:
            await self.actor.close.remote()
        finally:
            self.kill()

    def kill(self) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(self.actor, no_restart=True)


@functools.cache
def _ray_actor_class() -> Any:
    """The Ray actor class that hosts one env (built on first use so that ``ray`` stays optional)."""
    import ray

    class EnvActor:
        def __init__(self, spec: gym.envs.registration.EnvSpec, env_kwargs: Mapping[str, Any]):
            import claw_envs  # noqa: F401  registers the built-in families in this worker process

            self.adapter = _EnvAdapter(spec, env_kwargs)

        async def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
            return await self.adapter.reset(seed, options)

        async def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
            return await self.adapter.step(action)

        async def close(self) -> None:
            await self.adapter.close()

    return ray.remote(EnvActor)


class EnvPool:
    """Run episodes of ``env_id`` with at most ``size`` in flight (see the module docstring).

    ``env_kwargs`` go to ``gymnasium.make``. Use ``async with EnvPool(...) as pool`` or call
    :meth:`aclose`. ``ray_actor_options`` sets how Ray places env actors (default :data:`RAY_ACTOR_OPTIONS`).
    """

    def __init__(
        self,
        env_id: str,
        size: int,
        *,
        env_kwargs: dict | None = None,
        backend: str = "local",
        step_timeout: float = 120.0,
        reset_timeout: float = 120.0,
        ray_actor_options: Mapping[str, Any] | None = None,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"unknown pool backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        for name, value in (("step_timeout", step_timeout), ("reset_timeout", reset_timeout)):
            if not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        self.spec = gym.spec(env_id)  # an unknown id fails here, not in the middle of a run
        self.env_id = env_id
        self.size = size
        self.env_kwargs = dict(env_kwargs or {})
        self.backend = backend
        self.step_timeout = float(step_timeout)
        self.reset_timeout = float(reset_timeout)
        self.ray_actor_options = dict(RAY_ACTOR_OPTIONS if ray_actor_options is None else ray_actor_options)
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Any] = []
        self._closing: set[asyncio.Task] = set()
        self._closed = False
        if backend == "ray":
            try:
                import ray
            except ImportError as err:
                raise ImportError("backend='ray' needs Ray: pip install 'claw-rl[ray]'") from err
            if not ray.is_initialized():
                ray.init(num_cpus=RAY_INIT_CPUS, include_dashboard=False, log_to_driver=False)

    async def __aenter__(self) -> EnvPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def run_episode(self, agent: Agent, *, seed: int | None = None, options: dict | None = None) -> EpisodeResult:
        """Play one episode with ``agent`` on a free env; never raises for env or agent failures."""
        if self._closed:
            raise RuntimeError("this EnvPool is closed")
        async with self._slots:
            try:
                env = self._idle.pop() if self._idle else self._create()
            except Exception as err:
                return EpisodeResult(
                    None, status=StepStatus.INFRA_FAILURE.value, error=f"could not create env: {err!r}"
                )
            try:
                result, healthy = await self._play(env, agent, seed, options)
            except BaseException:  # cancelled: the env is mid-step, so it cannot be trusted again
                self._discard(env, graceful=False)
                raise
            if healthy and not self._closed:
                self._idle.append(env)
            else:
                self._discard(env, graceful=result.status != StepStatus.TIMEOUT.value)
            return result

    async def run_episodes(
        self,
        agent: Agent,
        requests: Sequence[dict],
        *,
        on_done: Callable[[EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """requests: [{"seed":..., "options":...}, ...]; at most `size` in flight; results in request order."""
        checked = [_check_request(i, request) for i, request in enumerate(requests)]

        async def one(request: dict) -> EpisodeResult:
            result = await self.run_episode(agent, seed=request.get("seed"), options=request.get("options"))
            if on_done is not None:
                on_done(result)
            return result

        tasks = [asyncio.ensure_future(one(request)) for request in checked]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def aclose(self) -> None:
        """Close every idle env (busy ones are closed when their episode ends); safe to call twice."""
        self._closed = True
        while self._idle:
            self._discard(self._idle.pop(), graceful=True)
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    # -- internals ---------------------------------------------------------------------------

    def _create(self) -> Any:
        if self.backend == "ray":
            actor_cls = _ray_actor_class().options(**self.ray_actor_options)
            return _RayEnv(actor_cls.remote(self.spec, self.env_kwargs))
        return _EnvAdapter(self.spec, self.env_kwargs)

    def _discard(self, env: Any, *, graceful: bool) -> None:
        """Close ``env`` in the background (a Ray actor that may be stuck is killed at once)."""
        if isinstance(env, _RayEnv) and not graceful:
            env.kill()
            return
        task = asyncio.ensure_future(_close_quietly(env))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _play(self, env: Any, agent: Agent, seed: int | None, options: dict | None) -> tuple[EpisodeResult, bool]:
        """The episode and whether ``env`` may serve another one."""
        result = EpisodeResult(None)
        outcome = await _bounded(env.reset(seed, options), self.reset_timeout, "reset", result)
        if outcome is None:
            return result, False
        obs, info = outcome
        result.task_id = info.get("task_id")
        result.observations.append(obs)
        result.infos.append(info)
        while True:
            try:
                action = agent(obs, info)
                if inspect.isawaitable(action):
                    action = await action
            except Exception as err:
                result.status = StepStatus.INFRA_FAILURE.value
                result.error = f"agent raised {type(err).__name__}: {err}"
                return result, True
            action = coerce_action(action)
            result.actions.append(action)
            outcome = await _bounded(env.step(action), self.step_timeout, "step", result)
            if outcome is None:
                return result, False
            obs, reward, terminated, truncated, info = outcome
            result.observations.append(obs)
            result.rewards.append(float(reward))
            result.infos.append(info)
            status = str(info.get("status", StepStatus.OK.value))
            if status != StepStatus.OK.value:
                result.status = status
            if terminated or truncated:
                result.terminated, result.truncated = bool(terminated), bool(truncated)
                return result, result.status == StepStatus.OK.value


async def _bounded(coro: Awaitable[Any], seconds: float, what: str, result: EpisodeResult) -> Any:
    """``await coro`` within ``seconds``; on timeout or failure record it in ``result`` and return None."""
    try:
        async with asyncio.timeout(seconds) as scope:
            return await coro
    except TimeoutError as err:
        if scope.expired():
            result.status = StepStatus.TIMEOUT.value
            result.truncated = True
            result.error = f"env {what} took longer than {seconds:g} s; it was cancelled and the env replaced"
            return None
        result.status = StepStatus.INFRA_FAILURE.value
        result.error = f"env {what} raised {type(err).__name__}: {err}"
    except Exception as err:
        result.status = StepStatus.INFRA_FAILURE.value
        result.error = f"env {what} raised {type(err).__name__}: {err}"
    return None


async def _close_quietly(env: Any) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await env.close()
    if isinstance(env, _RayEnv):
        env.kill()


def _check_request(index: int, request: Any) -> dict:
    if not isinstance(request, Mapping):
        raise TypeError(f"request {index} must be a dict like {{'seed': 0, 'options': {{...}}}}, got {request!r}")
    unknown = set(request) - {"seed", "options"}
    if unknown:
        raise ValueError(f"request {index} has unknown keys {sorted(unknown)}; allowed: 'seed', 'options'")
    seed, options = request.get("seed"), request.get("options")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"request {index}: seed must be an int or None, got {seed!r}")
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"request {index}: options must be a dict or None, got {options!r}")
    return dict(request)
