"""claw_envs: a Gymnasium suite of agent environments whose ``step()`` returns next-state signals.

``import claw_envs`` registers every built-in family (``claw/Echo-v0`` …) with Gymnasium and loads
third-party families from the ``claw_envs`` entry-point group. This package never imports torch.
"""

from claw_envs.core import (
    ClawEnv,
    Evaluative,
    InfraFailure,
    NextState,
    Opening,
    StepStatus,
    Transition,
    UnicodeText,
    bad_action,
)
from claw_envs.registry import env_class, env_ids, family_spec, load_plugins, register, resolve_id
from claw_envs.spec import FamilySpec, JudgeTemplates, SpecError, TrainingDefaults
from claw_envs.tasks import ProceduralTasks, Task, TaskList, TaskSource


def _register_builtins() -> None:
    from claw_envs import conversation, echo, gui, swe, terminal, toolcall

    for family in (echo, conversation, toolcall, terminal, gui, swe):
        register(family.SPEC)


_register_builtins()
load_plugins()

__all__ = [
    "ClawEnv",
    "Evaluative",
    "FamilySpec",
    "InfraFailure",
    "JudgeTemplates",
    "NextState",
    "Opening",
    "ProceduralTasks",
    "SpecError",
    "StepStatus",
    "Task",
    "TaskList",
    "TaskSource",
    "TrainingDefaults",
    "Transition",
    "UnicodeText",
    "bad_action",
    "env_class",
    "env_ids",
    "family_spec",
    "load_plugins",
    "register",
    "resolve_id",
]
