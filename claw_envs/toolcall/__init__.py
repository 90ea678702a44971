"""``claw/ToolCall-v0``: math with a sandboxed Python tool, graded by math-verify.

``parse`` reads tool calls (Hermes ``<tool_call>`` blocks, OpenAI ``tool_calls``) and boxed answers,
``tools`` describes the ``python`` tool and reports its output, ``grading`` decides whether an answer is
right, ``datasets`` loads problems (AIME 2024, DAPO-Math, GSM8K, files, a built-in procedural set), and
``env`` is the environment.
"""

from claw_envs.toolcall.env import ToolCallEnv

__all__ = ["ToolCallEnv"]
