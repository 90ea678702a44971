"""Gymnasium ids ``claw/<Family>-v0`` for built-in families and third-party plugins.

Built-in families are registered when ``claw_envs`` is imported. A third-party package adds its own
through the ``claw_envs`` entry-point group: the entry point names either a ``ClawEnv`` subclass
(registered as ``claw/<ClassName without Env>-v0``) or a function that calls :func:`register` itself.
"""

from __future__ import annotations

import importlib
import warnings
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym

from claw_envs.core import ClawEnv

NAMESPACE = "claw"
ENTRY_POINT_GROUP = "claw_envs"

_FAMILIES: dict[str, str] = {}


def register(env_id: str, entry_point: str | type[ClawEnv], **kwargs: Any) -> None:
    """Register ``env_id`` (``claw/Name-v0``) with Gymnasium and with ``claw-envs list``."""
    if not env_id.startswith(f"{NAMESPACE}/"):
        raise ValueError(f"claw env ids live in the {NAMESPACE!r} namespace, e.g. 'claw/Echo-v0'; got {env_id!r}")
    target = entry_point if isinstance(entry_point, str) else f"{entry_point.__module__}:{entry_point.__qualname__}"
    if env_id in gym.registry:
        if _FAMILIES.get(env_id) == target:
            return
        del gym.registry[env_id]
    gym.register(id=env_id, entry_point=target, kwargs=kwargs, disable_env_checker=True)
    _FAMILIES[env_id] = target


def unregister(env_id: str) -> None:
    """Remove ``env_id`` from Gymnasium and from ``claw-envs list`` (tests, notebooks)."""
    _FAMILIES.pop(env_id, None)
    gym.registry.pop(env_id, None)


def env_ids() -> list[str]:
    """Every registered claw env id, sorted."""
    return sorted(_FAMILIES)


def env_class(env_id: str) -> type[ClawEnv]:
    """The ``ClawEnv`` subclass behind ``env_id`` (without constructing it)."""
    if env_id not in _FAMILIES:
        known = ", ".join(env_ids()) or "none"
        raise KeyError(f"unknown env {env_id!r}; registered: {known}")
    module, _, name = _FAMILIES[env_id].partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_id(name: str) -> str:
    """Accept ``conversation``, ``Conversation-v0`` or ``claw/Conversation-v0``."""
    if name in _FAMILIES:
        return name
    lowered = name.lower().removeprefix(f"{NAMESPACE}/")
    for env_id in _FAMILIES:
        short = env_id.removeprefix(f"{NAMESPACE}/").lower()
        if lowered in (short, short.rsplit("-v", 1)[0]):
            return env_id
    raise KeyError(f"unknown env {name!r}; registered: {', '.join(env_ids())}")


def load_plugins() -> list[str]:
    """Load third-party envs from the ``claw_envs`` entry-point group; returns what was loaded.

    A broken plugin is reported with a warning and skipped, never breaking ``import claw_envs``.
    """
    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, ClawEnv):
                register(f"{NAMESPACE}/{obj.__name__.removesuffix('Env')}-v0", obj)
            else:
                obj()
            loaded.append(ep.name)
        except Exception as err:  # a plugin must not break the suite
            warnings.warn(f"claw_envs plugin {ep.name!r} failed to load: {err}", stacklevel=2)
    return loaded
