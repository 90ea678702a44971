"""Scale-out on CPU: claw-train under ``accelerate launch`` (2 gloo processes) with its env actors on a local Ray
cluster started here, resumed with 2 ranks and one of them killed; a dead env actor; an unreachable
``--ray-address``; ranks started with different options or a step they cannot share; a rank 0 that cannot
start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from claw_train.pipeline.rundir import checkpoint_step, last_checkpoint

pytest.importorskip("ray", reason="ray is not installed (the [ray] extra)")

BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).parent / "fixtures" / "scale"
ACTOR_LOG_MARK = ":actor_name:EnvActor"
WORKER_LOG_MARK = ":actor_name:RolloutWorker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayCluster:
    """``ray start --head --block`` in a temp dir on free ports; SIGTERM stops exactly its processes."""

    def __init__(self) -> None:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.address = f"127.0.0.1:{free_port()}"
        command = [
            str(BIN / "ray"), "start", "--head", "--block", "--port", self.address.split(":")[1],
            "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
            "--temp-dir", str(self.temp_dir), "--num-cpus", "2", "--include-dashboard", "false",
            "--disable-usage-stats",
        ]  # fmt: skip
        # its workers import the test env from the fixtures folder
        python_path = os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": python_path, "RAY_AUTH_MODE": "disabled"}
        self.log = open(self.temp_dir / "ray-start.log", "w")  # noqa: SIM115  closed in stop()
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 90.0) -> None:
        from claw_train.pipeline.cluster import probe
        from claw_train.pipeline.rundir import RunError

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, (self.temp_dir / "ray-start.log").read_text()[-3000:]
            try:
                probe(self.address, timeout=2.0)
                return
            except RunError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def actor_logs(self) -> list[Path]:
        """The worker logs of processes that hosted an env actor."""
        return self.worker_logs(ACTOR_LOG_MARK)

    def worker_logs(self, mark: str) -> list[Path]:
        """The worker logs of processes that hosted an actor of the class ``mark`` names."""
        logs = (self.temp_dir / "session_latest" / "logs").glob("worker-*.out")
        return [p for p in logs if mark in p.read_text(errors="replace")[:2000]]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def ray_cluster():
    cluster = RayCluster()
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def toolcall_model() -> str:
    pytest.importorskip("trl")
    from claw_train.models.tiny import bootstrap

    return str(bootstrap("toolcall", steps=2, progress=False))


def accelerate_launch(port: int) -> list[str]:
    """Two gloo processes on this CPU (``--multi_gpu`` is accelerate's torchrun launcher; no GPU is needed)."""
    return [
        str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
    ]  # fmt: skip


def claw_train_ranks(model: str, out: Path, *options: str) -> list[str]:
    """``claw-train --env toolcall`` under ``accelerate launch`` with two ranks."""
    return [
        *accelerate_launch(free_port()), str(BIN / "claw-train"), "--env", "toolcall", "--model", model,
        "--report-to", "none", "--output-dir", str(out), "--no-display", *options,
    ]  # fmt: skip


LAUNCH_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
@pytest.mark.timeout(560)
def test_claw_train_under_accelerate_launch_on_a_ray_cluster_then_a_rank_dies_in_the_resumed_run(
    ray_cluster, toolcall_model, tmp_path
):
    from claw_train.runlog.logs import Ledger

    before = set(ray_cluster.actor_logs())
    out = tmp_path / "run"
    command = claw_train_ranks(
        toolcall_model, out, "--updates", "2", "--samples-per-step", "4", "--ray-address", ray_cluster.address
    )
    proc = subprocess.run(command, capture_output=True, text=True, timeout=280, env={**os.environ, **LAUNCH_ENV})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "rank 0 of 2" in output and "rank 1: finished 2 updates" in output

    entries = Ledger(out / "ledger.jsonl").effective()
    assert [e["update"] for e in entries] == [1, 2]
    assert all(len(e["samples"]) == 4 for e in entries)  # samples_per_step is the whole step's, over both ranks
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 2
    checkpoint = out / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file()
    assert (checkpoint / "rng_state_0.pth").is_file() and (checkpoint / "rng_state_1.pth").is_file()  # both trained
    assert set(ray_cluster.actor_logs()) - before, "no env actor ran on the Ray cluster"

    # --resume with two ranks; rank 1 is killed once the resumed run has checkpointed an update of its own
    resumed = claw_train_ranks(toolcall_model, out, "--resume", "--updates", "50", "--samples-per-step", "4",
                               "--checkpoint-every", "1")  # fmt: skip
    output, killed = kill_rank_1_after_checkpoint(resumed, out, 3)
    assert time.monotonic() - killed < 120  # the others were ended, not left waiting for the dead rank
    assert "rank      : 1" in output and "SIGKILL" in output, output[-3000:]  # the launcher names the dead rank
    kept = last_checkpoint(out / "checkpoints")
    assert kept is not None and checkpoint_step(kept) >= 3 and (kept / "model.safetensors").is_file()
    ledger = Ledger(out / "ledger.jsonl")
    assert {"kind": "resume", "from_update": 2, "attempt": 1} in ledger.records()
    upto = checkpoint_step(kept)
    assert [e["update"] for e in ledger.effective()][:upto] == list(range(1, upto + 1))  # nothing trained is lost


def kill_rank_1_after_checkpoint(command: list[str], out: Path, step: int) -> tuple[str, float]:
    """Launch ``command``; once checkpoint ``step`` is complete, SIGKILL rank 1; the output and when it was killed."""
    import psutil

    launcher = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **LAUNCH_ENV}
    )
    try:
        deadline = time.monotonic() + 240
        while (last := last_checkpoint(out / "checkpoints")) is None or checkpoint_step(last) < step:
            assert launcher.poll() is None and time.monotonic() < deadline, f"no checkpoint {step} was written"
            time.sleep(0.5)
        children = psutil.Process(launcher.pid).children(recursive=True)
        ranks = [p for p in children if "claw-train" in " ".join(p.cmdline())]
        next(p for p in ranks if p.environ().get("RANK") == "1").kill()
        killed = time.monotonic()
        output, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    return output, killed


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_dead_env_actor_costs_its_episode_as_an_infra_failure_and_is_replaced(ray_cluster):
    import ray

    from claw_envs.pool import EnvPool
    from claw_train.pipeline.cluster import connect

    sys.path.insert(0, str(FIXTURES))
    try:
        from sleepy_env import ENV_ID
    finally:
        sys.path.remove(str(FIXTURES))

    def agent(script: list[str]):
        async def act(obs, info):
            return script.pop(0)

        return act

    async def play() -> list:
        async with EnvPool(ENV_ID, 1, backend="ray", step_timeout=30) as pool:
            first = await pool.run_episode(agent(["a", "b"]))
            dead = await pool.run_episode(agent(["die"]))
            again = await pool.run_episode(agent(["a", "b"]))
            return [first, dead, again]

    if ray.is_initialized():
        ray.shutdown()
    connect(ray_cluster.address)
    try:
        first, dead, again = asyncio.run(play())
    finally:
        ray.shutdown()
    assert (first.status, first.terminated) == ("ok", True)
    assert dead.status == "infra_failure" and "step" in dead.error
    assert (again.status, again.terminated) == ("ok", True)
    pids = {first.infos[0]["pid"], again.infos[0]["pid"]}
    assert len(pids) == 2 and os.getpid() not in pids  # a new actor process replaced the dead one


@pytest.mark.parametrize(
    ("address", "said"),
    [
        (lambda: f"127.0.0.1:{free_port()}", "no Ray cluster answers there"),
        (lambda: "no-port-given", "give auto or HOST:PORT"),
    ],
)
def test_an_unreachable_ray_address_fails_fast_before_any_model_loads(tmp_path, address, said):
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "claw-train"), "--env", "toolcall", "--updates", "1", "--output-dir", str(tmp_path / "run"),
         "--ray-address", address(), "--no-display"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output[-3000:]
    assert "--ray-address" in output and said in output
    assert "tiny model" not in output and not (tmp_path / "run").exists()  # no model loaded, no run started
    assert time.monotonic() - started < 90


@pytest.mark.parametrize(
    ("launch_env", "said"),
    [
        ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, "FSDP shards the weights"),
        ({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, "DeepSpeed ZeRO-3 shards"),
    ],
)
def test_a_launch_that_shards_the_weights_stops_before_training_saying_what_works(tmp_path, launch_env, said):
    """What ``accelerate launch --use_fsdp`` / a ZeRO-3 config put in the environment (the sharded launch itself
    needs GPUs): rank 0 could not publish whole weights, so the run refuses to start and names DDP and ZeRO-1/2."""
    proc = subprocess.run(
        [str(BIN / "claw-train"), "--env", "toolcall", "--updates", "1", "--output-dir", str(tmp_path / "run"),
         "--no-display"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1", **launch_env},
    )  # fmt: skip
    output = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, output[-3000:]
    assert said in output and "DDP (--multi_gpu) or DeepSpeed ZeRO-1/2" in output
    assert not (tmp_path / "run" / "run.json").exists()  # nothing was started


def ranks_by_hand(argvs: list[list[str]], tmp_path: Path) -> list[subprocess.CompletedProcess]:
    """Start one claw-train per argv as ranks of one process group (what a launcher does), wait for all."""
    port = free_port()
    procs = []
    for rank, argv in enumerate(argvs):
        env = {
            **os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
            "LOCAL_RANK": str(rank), "WORLD_SIZE": str(len(argvs)), "LOCAL_WORLD_SIZE": str(len(argvs)),
            "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
        }  # fmt: skip
        procs.append(
            subprocess.Popen(
                [str(BIN / "claw-train"), *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
        )
    done = []
    for p in procs:
        stdout, _ = p.communicate(timeout=150)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    return done


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    ("rank_options", "said"),
    [
        ((["--seed", "0"], ["--seed", "1"]), "different options (seed: rank 0 0, rank 1 1)"),
        ((["--samples-per-step", "3"],) * 2, "--samples-per-step 3 cannot be shared out evenly across 2 processes"),
    ],
)
def test_ranks_that_disagree_or_cannot_share_a_step_stop_saying_why(tmp_path, toolcall_model, rank_options, said):
    base = ["--env", "toolcall", "--model", toolcall_model, "--updates", "1", "--output-dir", str(tmp_path / "run"),
            "--report-to", "none", "--no-display"]  # fmt: skip
    ranks = ranks_by_hand([[*base, *options] for options in rank_options], tmp_path)
    for rank in ranks:
        output = " ".join(rank.stdout.split())
        assert rank.returncode == 2, output[-3000:]
        assert said in output, output[-3000:]
    assert not (tmp_path / "run" / "run.json").exists()  # no run was started


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_rank_0_that_cannot_start_releases_the_other_ranks(tmp_path, toolcall_model):
    argv = ["--env", "toolcall", "--model", toolcall_model, "--updates", "1", "--output-dir", str(tmp_path / "none"),
            "--resume", "--report-to", "none", "--no-display"]  # fmt: skip
    leader, follower = ranks_by_hand([argv, argv], tmp_path)  # no launcher here to end rank 1: rank 0 must
    assert leader.returncode == 2 and "--resume: no run in" in leader.stdout, leader.stdout[-3000:]
    said = " ".join(follower.stdout.split())
    assert follower.returncode == 1, said[-3000:]
    assert "rank 1: rank 0 stopped before training: --resume: no run in" in said


@contextlib.contextmanager
def sglang_stand_in(model: str) -> Iterator[tuple[Any, str]]:
    """An SGLang-protocol server on loopback backed by the real tiny model (SGLang itself needs CUDA; see
    ``test_policy_sglang.StandIn``): what rollout workers on the cluster generate with; yields it and HOST:PORT."""
    from test_policy_sglang import StandIn, serving

    standin = StandIn(Path(model))
    try:
        with serving(standin) as url:
            yield standin, url.removeprefix("http://")
    finally:
        standin.policy.close()


@pytest.mark.slow
@pytest.mark.timeout(700)
@pytest.mark.parametrize("family", ["toolcall", "conversation"])  # groups of episodes (agent track); lone episodes
def test_claw_train_with_a_remote_policy_plays_its_episodes_on_rollout_workers_of_the_ray_cluster(
    ray_cluster, toolcall_model, tmp_path, family
):
    from claw_train.models.tiny import bootstrap
    from claw_train.runlog.logs import Ledger

    model = toolcall_model if family == "toolcall" else str(bootstrap(family, steps=2, progress=False))
    before = set(ray_cluster.worker_logs(WORKER_LOG_MARK))
    out = tmp_path / "run"
    with sglang_stand_in(model) as (standin, address):
        command = [
            str(BIN / "claw-train"), "--env", family, "--model", model, "--policy", f"sglang://{address}",
            "--publish-dir", str(tmp_path / "weights"), "--ray-address", ray_cluster.address, "--updates", "2",
            "--samples-per-step", "4", "--rollout-workers", "2", "--max-new-tokens", "48", "--eval-every", "0",
            "--report-to", "none", "--output-dir", str(out), "--no-display",
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, timeout=540, env={**os.environ, **LAUNCH_ENV})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "rollout workers (env + policy client) on the Ray cluster" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["updates"] == 2
    assert [e["update"] for e in Ledger(out / "ledger.jsonl").effective()] == [1, 2]
    workers = set(ray_cluster.worker_logs(WORKER_LOG_MARK)) - before
    assert workers, "no rollout worker ran on the cluster"  # the episodes played in worker processes
    generated = [body for route, body in standin.calls if route == "/generate" and body["sampling_params"].get(
        "max_new_tokens")]  # fmt: skip
    assert len(generated) >= 8  # every trained turn was generated through the servers, by the workers
    assert standin.version == "2"  # the trainer published each update; later turns came from the new weights


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_dead_rollout_worker_costs_its_episode_as_an_infra_failure_and_is_replaced(ray_cluster, toolcall_model):
    import ray

    from claw_train.pipeline.budget import InFlightBudget
    from claw_train.pipeline.cluster import connect
    from claw_train.pipeline.workers import RolloutWorkers
    from claw_train.policy.base import SamplingParams

    sys.path.insert(0, str(FIXTURES))
    try:
        from sleepy_env import ENV_ID
    finally:
        sys.path.remove(str(FIXTURES))
    sampling = SamplingParams(max_new_tokens=4, temperature=1.0)

    async def play(workers: RolloutWorkers, kill_after: float | None = None, budget=None) -> tuple[Any, list]:
        turns: list = []

        async def emit(turn) -> None:
            turns.append(turn)

        where = {"seed": 1, "options": None, "group_id": "g", "emit": emit, "budget": budget}
        episode = asyncio.ensure_future(workers.play_episode(sampling, **where))
        if kill_after is not None:
            await asyncio.sleep(kill_after)
            (actor,) = workers._busy  # the worker playing the episode: its process ends as if its node left
            ray.kill(actor, no_restart=True)
        return await episode, turns

    async def scenario() -> list:
        with sglang_stand_in(toolcall_model) as (_, address):
            policy = {"model": toolcall_model, "policy": f"sglang://{address}", "tokenizer_path": toolcall_model}
            workers = RolloutWorkers(ENV_ID, 1, env_kwargs={"delay": 2.0}, policy=policy, actor_options={"num_cpus": 0})
            budget = InFlightBudget(5, allotment=3)  # a lone episode takes its max_turns (3) slots before it starts
            try:
                first = await play(workers, budget=budget)
                held = 5 - budget.available
                return [first, held, await play(workers, kill_after=3.0), await play(workers), workers.started]
            finally:
                await workers.aclose()

    async def cannot_start() -> Any:  # a worker whose node has no such model folder: the reason reaches the run
        policy = {"model": "m", "policy": "sglang://127.0.0.1:9", "tokenizer_path": "/nowhere/Qwen3-4B"}
        workers = RolloutWorkers(ENV_ID, 1, env_kwargs={}, policy=policy, actor_options={"num_cpus": 0})
        try:
            return (await play(workers))[0]
        finally:
            await workers.aclose()

    if ray.is_initialized():
        ray.shutdown()
    connect(ray_cluster.address)
    try:
        (first, first_turns), held, (dead, dead_turns), (again, again_turns), started = asyncio.run(scenario())
        unstarted = asyncio.run(cannot_start())
    finally:
        ray.shutdown()
    assert (first.status, first.turns, len(first_turns)) == ("ok", 2, 2)
    assert all(t.completion_ids and t.logprobs for t in first_turns)  # token-exact turns crossed the processes
    assert held == 2  # the unused slot came back; each handed-on turn holds one until it is trained or masked
    assert dead.status == "infra_failure" and "rollout worker failed" in dead.error and dead_turns == []
    assert (again.status, len(again_turns)) == ("ok", 2)
    assert started == 2  # a new worker replaced the dead one
    assert unstarted.status == "infra_failure" and "'/nowhere/Qwen3-4B' does not exist" in unstarted.error
    assert "\x1b" not in unstarted.error  # Ray's colour codes are taken out
