"""Policy backends behind one async interface: inprocess (transformers), sglang (HTTP), openai (eval).

``load_policy(model, policy)`` builds one from CLI strings; the backends import torch/transformers lazily.
"""

from claw_train.policy.base import Completion, Policy, PolicyError, SamplingParams
from claw_train.policy.loader import load_policy

__all__ = ["Completion", "Policy", "PolicyError", "SamplingParams", "load_policy"]
