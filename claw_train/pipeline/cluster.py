"""Rollouts on a Ray cluster (``--ray-address``): join it, or fail fast saying why; actors placed by resources.

``auto`` joins the cluster this machine belongs to (``RAY_ADDRESS``, or the one ``ray start`` started here);
``HOST:PORT`` is a head node's GCS address. Before Ray is asked to join, the address is probed (a TCP connect,
then Ray's own ``GetClusterId`` call) with a short timeout, since ``ray.init`` waits a long time for an address
where no Ray answers. Env actors go where ``--ray-resources`` says (``num_cpus``, ``num_gpus``, ``memory`` or a
custom resource such as ``sandbox``); an actor that dies (its node left) costs its episode, counted as an
infrastructure failure, and the pool starts a new one. With a remote policy (``sglang://``) the actors are whole
rollout workers (:mod:`~claw_train.pipeline.workers`: env + policy client), so only finished turns reach the
trainer; with the in-process policy they are env actors and the agents stay with the model in this process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from claw_envs.sandbox.isolation import ISOLATION_ENV
from claw_train.pipeline.rundir import RunError

if TYPE_CHECKING:
    from claw_train.options.tree import RolloutConfig
    from claw_train.pipeline.episode_runner import EpisodeRunner
    from claw_train.policy.base import Policy

PROBE_TIMEOUT = 5.0
ACTOR_OPTIONS = ("num_cpus", "num_gpus", "memory")


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``auto`` or ``HOST:PORT``); raise :class:`RunError` saying why not."""
    try:
        import ray
    except ImportError:
        raise RunError("--ray-address needs Ray: pip install 'claw-rl[ray]'") from None
    if ray.is_initialized():
        return
    if address != "auto":
        probe(address)
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise RunError(f"--ray-address {address}: cannot join the Ray cluster: {err}") from None


def probe(address: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise :class:`RunError` unless a Ray head (its GCS) answers at ``HOST:PORT`` within ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RunError(f"--ray-address {address!r}: give auto or HOST:PORT (the head node's GCS port, 6379 by default)")
    hint = f"start one with `ray start --head --port {port}` or give the head node's address"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise RunError(f"--ray-address {address}: no Ray cluster answers there ({err}); {hint}") from None
    import grpc

    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/ray.rpc.NodeInfoGcsService/GetClusterId")
        try:
            call(b"", timeout=timeout)
        except grpc.RpcError as err:
            raise RunError(
                f"--ray-address {address}: something answers there but it is not a Ray head node "
                f"({err.code().name}); {hint}"
            ) from None


def actor_options(resources: Mapping[str, Any]) -> dict[str, Any]:
    """Ray actor options for env actors from ``--ray-resources`` (``num_cpus 1 sandbox 1``): Ray's own resource
    options as they are, any other name a custom resource. ``$CLAW_SANDBOX_ISOLATION`` goes with them, so actors
    on other nodes run their sandboxes as this process does."""
    options: dict[str, Any] = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}
    if isolation := os.environ.get(ISOLATION_ENV):
        options["runtime_env"] = {"env_vars": {ISOLATION_ENV: isolation}}
    custom: dict[str, float] = {}
    for name, value in resources.items():
        try:
            amount = float(value)
        except (TypeError, ValueError):
            raise RunError(f"--ray-resources {name}: needs a number, got {value!r}") from None
        if amount < 0:
            raise RunError(f"--ray-resources {name}: must be >= 0, got {value!r}")
        if name in ACTOR_OPTIONS:
            options[name] = int(amount) if name == "memory" else amount
        else:
            custom[name] = amount
    if custom:
        options["resources"] = custom
    return options


def join_cluster(rollout: RolloutConfig) -> None:
    """Join ``--ray-address``'s cluster (nothing without one); the resource options are checked first."""
    if rollout.ray_address is None:
        if rollout.ray_resources:
            raise RunError("--ray-resources places env actors on a Ray cluster: give --ray-address too")
        return
    actor_options(rollout.ray_resources)
    connect(rollout.ray_address)


def worker_policy(
    policy: Policy, rollout: RolloutConfig, *, model: str, family: str, retries: int
) -> dict[str, Any] | None:
    """``load_policy``'s arguments for rollout workers on the Ray cluster: with ``--ray-address`` and a policy they
    can reach from their own processes (SGLang servers), else ``None`` (the agents stay in the trainer's process)."""
    from claw_train.policy.sglang import SGLangPolicy

    if rollout.ray_address is None or not isinstance(policy, SGLangPolicy):
        return None
    return {
        "model": model,
        "policy": "sglang://" + ",".join(url.split("://", 1)[-1] for url in policy.urls),
        "family": family,
        "tokenizer_path": policy.tokenizer_path,
        "retries": retries,
    }


def episode_runner(
    env_id: str,
    size: int,
    env_kwargs: dict[str, Any],
    rollout: RolloutConfig,
    policy: Policy,
    worker_policy: Mapping[str, Any] | None = None,
) -> EpisodeRunner:
    """Where the run's episodes play: an env pool in this process, env actors on ``--ray-address``'s cluster (both
    played by ``policy`` here), or rollout workers there when ``worker_policy`` (``load_policy``'s arguments for
    their clients) is given."""
    from claw_envs.pool import EnvPool
    from claw_train.pipeline.episode_runner import LocalEpisodes

    if rollout.ray_address is None:
        return LocalEpisodes(EnvPool(env_id, size, env_kwargs=env_kwargs), policy)
    options = actor_options(rollout.ray_resources)
    if worker_policy is not None:
        from claw_train.pipeline.workers import RolloutWorkers

        return RolloutWorkers(env_id, size, env_kwargs=env_kwargs, policy=worker_policy, actor_options=options)
    pool = EnvPool(env_id, size, env_kwargs=env_kwargs, backend="ray", ray_actor_options=options)
    return LocalEpisodes(pool, policy)
