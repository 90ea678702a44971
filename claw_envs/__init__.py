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
from claw_envs.registry import env_class, env_ids, load_plugins, register, resolve_id
from claw_envs.tasks import ProceduralTasks, Task, TaskList, TaskSource

register("claw/Echo-v0", "claw_envs.echo:EchoEnv")
register("claw/Conversation-v0", "claw_envs.conversation:ConversationEnv")
register("claw/ToolCall-v0", "claw_envs.toolcall:ToolCallEnv")
register("claw/Terminal-v0", "claw_envs.terminal:TerminalEnv")
load_plugins()

__all__ = [
    "ClawEnv",
    "Evaluative",
    "InfraFailure",
    "NextState",
    "Opening",
    "ProceduralTasks",
    "StepStatus",
    "Task",
    "TaskList",
    "TaskSource",
    "Transition",
    "UnicodeText",
    "bad_action",
    "env_class",
    "env_ids",
    "load_plugins",
    "register",
    "resolve_id",
]
