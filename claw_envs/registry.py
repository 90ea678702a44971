"""Gymnasium ids ``claw/<Family>-v0`` and the :class:`~claw_envs.spec.FamilySpec` behind each.

Built-in families register their spec when ``claw_envs`` is imported. A third-party package adds its own
through the ``claw_envs`` entry-point group; the entry point names one of:

* a :class:`~claw_envs.spec.FamilySpec` (the full declaration: judge templates, defaults, evaluation…);
* a ``ClawEnv`` subclass: registered as ``claw/<ClassName without Env>-v0`` with a default spec whose name
  is the entry point's name;
* a function that calls :func:`register` itself.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from importlib.metadata import entry_points

import gymnasium as gym

from claw_envs.core import ClawEnv
from claw_envs.spec import FamilySpec, SpecError, resolve
from claw_envs.tasks import TaskSource

NAMESPACE = "claw"
ENTRY_POINT_GROUP = "claw_envs"

_SPECS: dict[str, FamilySpec] = {}


def register(spec: FamilySpec) -> None:
    """Register ``spec.env_id`` with Gymnasium, ``claw-envs list``, ``claw-train`` and ``claw-eval``.

    A spec that declares ``load_tasks`` hands its env class that loader (``ClawEnv.task_loader``, inherited by
    subclasses), so the class imports here; the loader itself is imported when a task source is first read."""
    if not isinstance(spec, FamilySpec):
        raise SpecError(f"register() takes a FamilySpec, got {type(spec).__name__}")
    clash = next((s for s in _SPECS.values() if s.name == spec.name and s.env_id != spec.env_id), None)
    if clash is not None:
        raise SpecError(f"family name {spec.name!r} is taken by {clash.env_id}")
    if spec.env_id in gym.registry:
        if _SPECS.get(spec.env_id) == spec:
            return
        del gym.registry[spec.env_id]
    env = _loader_owner(spec)  # before anything is registered: an entry point that cannot be imported fails here
    if spec.env_id in _SPECS:
        _take_loader(_SPECS[spec.env_id])
    gym.register(id=spec.env_id, entry_point=spec.entry_point, disable_env_checker=True)
    _SPECS[spec.env_id] = spec
    if env is not None and spec.load_tasks is not None:
        env.task_loader = TaskLoader(spec.load_tasks)


def unregister(env_id: str) -> None:
    """Remove ``env_id`` from Gymnasium and from ``claw-envs list`` (tests, notebooks)."""
    spec = _SPECS.pop(env_id, None)
    gym.registry.pop(env_id, None)
    if spec is not None:
        _take_loader(spec)


def env_ids() -> list[str]:
    """Every registered claw env id, sorted."""
    return sorted(_SPECS)


def specs() -> list[FamilySpec]:
    """Every registered spec, in registration order (built-in families first)."""
    return list(_SPECS.values())


def family_spec(name: str) -> FamilySpec:
    """The spec of a family given by name (``toolcall``), short id (``ToolCall-v0``) or id."""
    return _SPECS[resolve_id(name)]


def env_class(env_id: str) -> type[ClawEnv]:
    """The ``ClawEnv`` subclass behind ``env_id`` (without constructing it)."""
    return resolve(family_spec(env_id).entry_point)


@dataclass(frozen=True)
class TaskLoader:
    """A family's task loader as :func:`register` hands it to the env class (``ClawEnv.task_loader``): the import
    string of ``FamilySpec.load_tasks``, resolved when a task source is first read, not at registration."""

    target: str

    def __call__(self, source: str, split: str = "train") -> TaskSource:
        return resolve(self.target)(source, split=split)


def _loader_owner(spec: FamilySpec) -> type[ClawEnv] | None:
    """The env class ``spec`` hands its task loader to (``None`` when it declares none, or its entry point is a
    factory rather than a ``ClawEnv`` subclass)."""
    if spec.load_tasks is None:
        return None
    env = resolve(spec.entry_point)
    return env if isinstance(env, type) and issubclass(env, ClawEnv) else None


def _take_loader(spec: FamilySpec) -> None:
    """Take back the task loader ``spec`` handed its env class (when the class still holds that one)."""
    env = _loader_owner(spec)
    if env is not None and env.__dict__.get("task_loader") == TaskLoader(str(spec.load_tasks)):
        del env.task_loader


def resolve_id(name: str) -> str:
    """Accept ``conversation``, ``Conversation-v0`` or ``claw/Conversation-v0``; ``KeyError`` lists the choices."""
    if name in _SPECS:
        return name
    lowered = name.lower().removeprefix(f"{NAMESPACE}/")
    for env_id, spec in _SPECS.items():
        short = env_id.removeprefix(f"{NAMESPACE}/").lower()
        if lowered in (spec.name, short, short.rsplit("-v", 1)[0]):
            return env_id
    choices = ", ".join(sorted(s.name for s in _SPECS.values())) or "none"
    raise KeyError(f"unknown env {name!r}; registered families: {choices}")


def load_plugins() -> list[str]:
    """Load third-party families from the ``claw_envs`` entry-point group; returns the names loaded.

    A broken plugin is reported with a warning and skipped, never breaking ``import claw_envs``.
    """
    loaded = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if isinstance(obj, FamilySpec):
                register(obj)
            elif isinstance(obj, type) and issubclass(obj, ClawEnv):
                short = obj.__name__.removesuffix("Env")
                entry = f"{obj.__module__}:{obj.__qualname__}"
                register(FamilySpec(name=ep.name.lower(), env_id=f"{NAMESPACE}/{short}-v0", entry_point=entry))
            elif callable(obj):
                obj()
            else:
                raise SpecError(f"{ep.value} is neither a FamilySpec, a ClawEnv subclass nor a function")
            loaded.append(ep.name)
        except Exception as err:  # a plugin must not break the suite
            warnings.warn(f"claw_envs plugin {ep.name!r} failed to load: {err}", stacklevel=2)
    return loaded
