"""``claw/Echo-v0``: the smallest complete claw environment, written to be read.

The task shows a phrase; the agent must reply with exactly that phrase. A miss gets a next state
with ``evaluative`` -1 and a ``directive`` that says what to send; a hit ends the episode with
outcome +1; running out of turns ends it with outcome -1. ``docs/adding-an-env.md`` walks through it.
"""

from claw_envs.echo.env import EchoEnv
from claw_envs.spec import FamilySpec, TrainingDefaults

SPEC = FamilySpec(
    name="echo",
    env_id="claw/Echo-v0",
    entry_point="claw_envs.echo.env:EchoEnv",
    training=TrainingDefaults(max_new_tokens=48, tokenizer_corpus=True),
    load_tasks="claw_envs.echo.env:load_tasks",
    description="repeat a phrase exactly (the reference env)",
)

__all__ = ["SPEC", "EchoEnv"]
