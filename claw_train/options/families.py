"""From run options to a family's parts: its spec (:func:`spec_for`), its tasks (``--tasks`` or the built-in ones),
the keyword arguments its env is built with and the isolation its sandboxes run under. Everything family-specific
comes from the :class:`~claw_envs.FamilySpec`."""

from __future__ import annotations

import os
from typing import Any

import claw_envs
from claw_envs import FamilySpec
from claw_envs.sandbox.isolation import ISOLATION_ENV, requested
from claw_envs.spec import resolve
from claw_envs.tasks import TaskSource, TaskSourceError, load_source
from claw_train.options.resolve import spec_for
from claw_train.options.tree import ConfigError, RolloutConfig
from claw_train.options.yaml_text import option_values


def tasks_for(spec: FamilySpec, source: str | None, split: str) -> TaskSource:
    """``--tasks`` read by the family's loader, or the family's built-in tasks of ``split``."""
    if source is None:
        return claw_envs.env_class(spec.env_id).default_tasks(split)
    if spec.load_tasks is None:
        raise ConfigError(f"--tasks: the {spec.name!r} family declares no task loader (FamilySpec.load_tasks)")
    try:
        return load_source(resolve(spec.load_tasks), source, split)
    except TaskSourceError as err:  # the same reading and the same reasons as the env's own tasks=
        raise ConfigError(f"--tasks {source}: {err.reason}") from None


def env_kwargs_for(spec: FamilySpec, rollout: RolloutConfig) -> dict[str, Any]:
    """Constructor arguments for the family's env: ``--env-kwargs``, the options it takes by name, ``--max-turns``."""
    kwargs = option_values(rollout.env_kwargs)
    for name in spec.env_options:
        value = getattr(rollout, name, None)
        if value is not None:
            kwargs.setdefault(name, value)
    if rollout.max_turns is not None:
        kwargs.setdefault("max_turns", rollout.max_turns)
    return kwargs


def max_turns_of(spec: FamilySpec, rollout: RolloutConfig) -> int:
    """The turn limit episodes run under: ``--max-turns``, else the env's own default."""
    return int(rollout.max_turns or claw_envs.env_class(spec.env_id).default_max_turns)


def check_env_options(spec: FamilySpec, rollout: RolloutConfig) -> None:
    """Build the family's env once with the run's options and close it, so one it refuses (``--persona nobody``, a
    misspelt ``--env-kwargs`` name) is a :class:`ConfigError` before any model loads. Envs keep their heavy work
    (containers, browsers, sandboxes) for ``reset``, so this costs next to nothing."""
    try:
        env = claw_envs.env_class(spec.env_id)(**env_kwargs_for(spec, rollout))
    except (TypeError, ValueError, KeyError, OSError) as err:
        raise ConfigError(f"--env {spec.name}: the env refuses these options: {err}") from None
    env.close()


def apply_sandbox_isolation(rollout: RolloutConfig) -> str | None:
    """Make ``--sandbox-isolation`` this process's ``$CLAW_SANDBOX_ISOLATION``, which every local sandbox started here
    (or by the env workers and Ray actors started from here) reads; None keeps the environment's. Returns the line a
    run's summary carries when that is rlimits only, else None; a bad ``$CLAW_SANDBOX_ISOLATION`` is a
    :class:`ConfigError`."""
    if rollout.sandbox_isolation is not None:
        os.environ[ISOLATION_ENV] = rollout.sandbox_isolation
    try:
        reduced = requested("auto") == "rlimits"
    except ValueError as err:
        raise ConfigError(str(err)) from None
    how = "--sandbox-isolation rlimits" if rollout.sandbox_isolation else f"{ISOLATION_ENV}=rlimits"
    reason = f"no namespace isolation: agent commands run with this user's rights; opted in with {how}"
    return f"sandbox: rlimits only ({reason})" if reduced else None


__all__ = ["apply_sandbox_isolation", "check_env_options", "env_kwargs_for", "max_turns_of", "spec_for", "tasks_for"]
