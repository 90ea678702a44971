"""Policy backends behind one async interface: inprocess (transformers), sglang (HTTP), openai (eval)."""

from claw_train.policy.base import Completion, Policy, PolicyError, SamplingParams

__all__ = ["Completion", "Policy", "PolicyError", "SamplingParams"]
