"""``claw/ToolCall-v0``: math with a sandboxed Python tool, graded by math-verify.

``actions`` reads tool calls (Hermes ``<tool_call>`` blocks, OpenAI ``tool_calls``) and boxed answers,
``tools`` describes the ``python`` tool and reports its output, ``signals`` decides whether an answer is
right, ``tasks`` loads problems (AIME 2024, DAPO-Math, GSM8K, files, a built-in procedural set), and
``env`` is the environment.
"""

from claw_envs.spec import FamilySpec, JudgeTemplates, TrainingDefaults
from claw_envs.toolcall.env import ToolCallEnv

SPEC = FamilySpec(
    name="toolcall",
    env_id="claw/ToolCall-v0",
    entry_point="claw_envs.toolcall.env:ToolCallEnv",
    judge=JudgeTemplates(prm="prm_toolcall", hint="hint_agent"),
    training=TrainingDefaults(max_new_tokens=256, max_turns=4, group_size=4, tokenizer_corpus=True),
    load_tasks="claw_envs.toolcall.tasks:load_dataset",
    evaluation="claw_envs.toolcall.evaluation:AnswerEvaluation",
    description="math with a sandboxed Python tool, graded by math-verify",
)

__all__ = ["SPEC", "ToolCallEnv"]
