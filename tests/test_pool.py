"""EnvPool: bounded concurrency, request order, timeouts that replace envs, failures as results, Ray."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from claw_envs import ClawEnv, InfraFailure, NextState, Opening, StepStatus, Task, TaskList, Transition
from claw_envs.episodes import EpisodeResult
from claw_envs.pool import EnvPool


class PoolTestEnv(ClawEnv):
    """Actions: ``done`` ends the episode, ``hang`` never returns, ``crash`` raises, ``infra`` fails infra."""

    family = "pooltest"
    default_max_turns = 4
    ids = itertools.count()
    closed: ClassVar[list[int]] = []
    cancelled: ClassVar[list[int]] = []

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.uid = next(self.ids)
        self.busy = False

    @classmethod
    def default_tasks(cls, split: str = "train") -> TaskList:
        return TaskList([Task(f"t{i}", split, {"n": i}) for i in range(8)], split)

    @contextlib.contextmanager
    def _exclusive(self):
        """Fails loudly if the pool ever lets two episodes use this env at the same time."""
        if self.busy:
            raise RuntimeError("two episodes on one env at once")
        self.busy = True
        try:
            yield
        finally:
            self.busy = False

    async def _begin(self, task: Task) -> Opening:
        with self._exclusive():
            await asyncio.sleep(0.01)
            if task.data["n"] == 7:
                await asyncio.sleep(3600)
            return Opening(observation=f"task {task.id}", messages=[], info={"env_uid": self.uid, "pid": os.getpid()})

    async def _act(self, action: str) -> Transition:
        with self._exclusive():
            try:
                await asyncio.sleep(0.01)
                if action == "hang":
                    await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.append(self.uid)
                raise
        if action == "crash":
            raise RuntimeError("the env broke")
        if action == "infra":
            raise InfraFailure("sandbox vanished", StepStatus.SANDBOX_FAILURE)
        done = action == "done"
        return Transition(
            observation=f"got {action}",
            next_state=NextState(text=f"got {action}"),
            reward=1.0 if done else 0.0,
            terminated=done,
            info={"env_uid": self.uid},
        )

    async def aclose(self) -> None:
        self.closed.append(self.uid)


class SyncOnlyEnv(gym.Env):
    """A plain Gymnasium env without coroutines: the pool runs it in a worker thread."""

    observation_space = gym.spaces.Discrete(10)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return 0, {"task_id": "sync"}

    def step(self, action):
        self.steps = getattr(self, "steps", 0) + 1
        if action == "block":
            time.sleep(1.0)
        return self.steps, 0.5, action == "stop", False, {}


# Registered with Gymnasium only (not claw's registry), so suites that walk every claw env skip them.
for _env_id, _entry in (("pooltest/Claw-v0", PoolTestEnv), ("pooltest/SyncOnly-v0", SyncOnlyEnv)):
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_entry, disable_env_checker=True)


def scripted(*actions: str):
    """An agent that plays ``actions`` in order (one script per episode, keyed by the reset obs)."""
    plays: dict[str, list[str]] = {}

    async def agent(obs: Any, info: dict) -> str:
        if info["step_index"] == 0:
            plays[info["task_id"]] = list(actions)
        await asyncio.sleep(0)
        return plays[info["task_id"]].pop(0)

    return agent


async def test_episodes_come_back_in_request_order_with_at_most_size_in_flight():
    active, peak, done_order = set(), [0], []

    async def agent(obs, info):
        active.add(info["task_id"])
        peak[0] = max(peak[0], len(active))
        await asyncio.sleep(0.02)
        return "done" if info["step_index"] >= 1 else "next"

    def on_done(result: EpisodeResult) -> None:
        active.discard(result.task_id)
        done_order.append(result.task_id)

    requests = [{"options": {"task_id": f"t{i}"}} for i in (5, 0, 3, 1, 6, 2)]
    async with EnvPool("pooltest/Claw-v0", 2) as pool:
        results = await pool.run_episodes(agent, requests, on_done=on_done)
        assert len(pool._idle) <= 2
    assert [r.task_id for r in results] == ["t5", "t0", "t3", "t1", "t6", "t2"]
    assert sorted(done_order) == sorted(r.task_id for r in results)
    assert peak[0] == 2  # concurrency happened, and never beyond size
    for r in results:
        assert (r.status, r.error, r.terminated, r.truncated) == ("ok", None, True, False)
        assert r.actions == ["next", "done"] and r.rewards == [0.0, 1.0]
        assert len(r.observations) == len(r.infos) == 3
        assert r.infos[0]["step_index"] == 0 and isinstance(r.infos[-1]["next_state"], NextState)
    assert len({r.infos[0]["env_uid"] for r in results}) <= 2


async def test_a_step_over_the_timeout_is_cancelled_and_its_env_replaced():
    async with EnvPool("pooltest/Claw-v0", 1, step_timeout=0.3) as pool:
        hung = await pool.run_episode(scripted("next", "hang"), options={"task_id": "t1"})
        assert (hung.status, hung.truncated, hung.terminated) == ("timeout", True, False)
        assert "0.3 s" in hung.error and hung.actions == ["next", "hang"]
        bad_uid = hung.infos[0]["env_uid"]
        await asyncio.sleep(0.05)
        assert bad_uid in PoolTestEnv.cancelled and bad_uid in PoolTestEnv.closed
        after = await pool.run_episode(scripted("done"), options={"task_id": "t2"})
        assert after.status == "ok" and after.infos[0]["env_uid"] != bad_uid


async def test_a_reset_over_its_timeout_becomes_a_timeout_result():
    async with EnvPool("pooltest/Claw-v0", 1, reset_timeout=0.2) as pool:
        result = await pool.run_episode(scripted("done"), options={"task_id": "t7"})
        assert result.status == "timeout" and "reset" in result.error
        assert result.observations == [] and result.task_id is None
        ok = await pool.run_episode(scripted("done"), options={"task_id": "t0"})
        assert ok.status == "ok"


async def test_agent_and_env_failures_are_results_not_exceptions():
    async def broken_agent(obs, info):
        raise ValueError("policy server down")

    async with EnvPool("pooltest/Claw-v0", 2) as pool:
        requests = [{"options": {"task_id": "t0"}}, {"options": {"task_id": "t1"}}]
        results = await pool.run_episodes(broken_agent, requests)
        for r in results:
            assert r.status == "infra_failure" and "ValueError: policy server down" in r.error
            assert r.actions == [] and r.task_id in ("t0", "t1")

        crashed = await pool.run_episode(scripted("crash"), options={"task_id": "t2"})
        assert crashed.status == "infra_failure" and "RuntimeError: the env broke" in crashed.error
        infra = await pool.run_episode(scripted("infra"), options={"task_id": "t3"})
        assert infra.status == StepStatus.SANDBOX_FAILURE.value and infra.truncated
        assert infra.infos[-1]["status"] == "sandbox_failure"
        await asyncio.sleep(0.05)
        assert crashed.infos[0]["env_uid"] in PoolTestEnv.closed
        assert infra.infos[0]["env_uid"] in PoolTestEnv.closed


async def test_cancelling_run_episodes_cancels_steps_and_drops_their_envs():
    cancelled_before = len(PoolTestEnv.cancelled)
    pool = EnvPool("pooltest/Claw-v0", 2, step_timeout=60)
    task = asyncio.ensure_future(
        pool.run_episodes(scripted("hang"), [{"options": {"task_id": "t4"}}, {"options": {"task_id": "t5"}}])
    )
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await pool.aclose()
    assert pool._idle == []
    assert len(PoolTestEnv.cancelled) == cancelled_before + 2
    with pytest.raises(RuntimeError, match="closed"):
        await pool.run_episode(scripted("done"))


async def test_sync_only_envs_run_in_a_thread_and_time_out_too():
    async def go_then_stop(obs, info):
        return "go" if obs == 0 else "stop"

    async def block(obs, info):
        return "block"

    async with EnvPool("pooltest/SyncOnly-v0", 2, step_timeout=0.3) as pool:
        results = await pool.run_episodes(go_then_stop, [{"seed": 1}, {"seed": 2}])
        assert [(r.status, r.rewards, r.terminated, r.task_id) for r in results] == [
            ("ok", [0.5, 0.5], True, "sync")
        ] * 2
        blocked = await pool.run_episode(block, seed=3)
        assert (blocked.status, blocked.truncated) == ("timeout", True)


async def test_the_echo_env_through_the_pool_matches_a_direct_env():
    direct = gym.make("claw/Echo-v0").unwrapped
    expected = []
    for seed in range(4):
        await direct.areset(seed=seed)
        phrase = direct.reference_action()
        _, reward, terminated, _, _ = await direct.astep(phrase)
        expected.append((direct.task.id, phrase, reward, terminated))

    async def echo_agent(obs, info):
        return obs.split(": ", 1)[1]

    async with EnvPool("claw/Echo-v0", 2) as pool:
        results = await pool.run_episodes(echo_agent, [{"seed": s} for s in range(4)])
    assert [(r.task_id, r.actions[0], r.rewards[0], r.terminated) for r in results] == expected


async def test_bad_pool_input_fails_early_and_clearly():
    with pytest.raises(gym.error.Error):
        EnvPool("claw/NoSuchEnv-v0", 2)
    with pytest.raises(ValueError, match="size"):
        EnvPool("claw/Echo-v0", 0)
    with pytest.raises(ValueError, match="backend"):
        EnvPool("claw/Echo-v0", 1, backend="threads")
    with pytest.raises(ValueError, match="step_timeout"):
        EnvPool("claw/Echo-v0", 1, step_timeout=-1)
    async with EnvPool("claw/Echo-v0", 1) as pool:
        with pytest.raises(TypeError, match="request 1"):
            await pool.run_episodes(scripted("x"), [{"seed": 0}, 5])
        with pytest.raises(ValueError, match="unknown keys"):
            await pool.run_episodes(scripted("x"), [{"seed": 0, "temperature": 1.0}])
        with pytest.raises(ValueError, match="seed"):
            await pool.run_episodes(scripted("x"), [{"seed": "zero"}])
        unknown = await pool.run_episode(scripted("x"), options={"task_id": "no-such-task"})
        assert unknown.status == "infra_failure" and "no-such-task" in unknown.error
    async with EnvPool("pooltest/Claw-v0", 1, env_kwargs={"no_such_kwarg": 1}) as pool:
        result = await pool.run_episode(scripted("done"))
    assert result.status == "infra_failure" and "could not create env" in result.error
    assert "no_such_kwarg" in result.error


@pytest.fixture
def local_ray(monkeypatch):
    ray = pytest.importorskip("ray", reason="ray is not installed (the [ray] extra)")
    if ray.is_initialized():
        ray.shutdown()
    tests_dir = str(Path(__file__).resolve().parent)
    # Ray's workers must import this module to build PoolTestEnv from its registered entry point.
    python_path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": python_path}},
    )
    yield ray
    ray.shutdown()


@pytest.mark.slow
async def test_ray_backend_runs_envs_in_actors_and_replaces_a_hung_one(local_ray):
    async with EnvPool("pooltest/Claw-v0", 2, backend="ray", step_timeout=1.0) as pool:
        results = await pool.run_episodes(
            scripted("next", "done"), [{"options": {"task_id": f"t{i}"}} for i in range(3)]
        )
        assert [(r.task_id, r.status, r.rewards, r.terminated) for r in results] == [
            (f"t{i}", "ok", [0.0, 1.0], True) for i in range(3)
        ]
        assert isinstance(results[0].infos[-1]["next_state"], NextState)  # results cross the process boundary
        pids = {r.infos[0]["pid"] for r in results}
        assert len(pids) == 2 and os.getpid() not in pids  # two actor processes, not this one

        hung, fine = await asyncio.gather(
            pool.run_episode(scripted("hang"), options={"task_id": "t4"}),
            pool.run_episode(scripted("done"), options={"task_id": "t5"}),
        )
        assert (hung.status, hung.truncated, fine.status) == ("timeout", True, "ok")
        assert len(pool._idle) == 1  # the hung actor was killed, not returned to the pool
        again = await pool.run_episodes(scripted("done"), [{"options": {"task_id": "t6"}}] * 2)
        assert [r.status for r in again] == ["ok", "ok"]
        assert len(pool._idle) == 2

        async def broken_agent(obs, info):
            raise ValueError("no policy")

        failed = await pool.run_episode(broken_agent, options={"task_id": "t0"})
        assert failed.status == "infra_failure" and "no policy" in failed.error
