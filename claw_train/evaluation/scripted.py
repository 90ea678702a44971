"""A policy that answers with a family's scripted reply (``--policy scripted:NAME``): tests and demos, no model."""

from __future__ import annotations

from collections.abc import Sequence

from claw_envs.evaluation import ScriptedReply
from claw_train.policy.base import Completion, Message, Policy, PolicyError, SamplingParams


class ScriptedPolicy(Policy):
    """Wraps ``reply(messages, seed) -> text`` from the family's evaluation extension."""

    def __init__(self, reply: ScriptedReply):
        self.reply = reply

    async def generate(self, prompt: Sequence[Message] | Sequence[int], sampling: SamplingParams) -> Completion:
        if not prompt or not isinstance(prompt[0], dict):
            raise PolicyError("a scripted policy answers chat messages, not token ids")
        text = self.reply(prompt, sampling.seed or 0)
        return Completion(text=text, token_ids=[], logprobs=[], finish_reason="stop", policy_version=self.version)
