"""Where judge samples come from: an OpenAI-compatible endpoint, the policy itself, or deterministic rules."""

from judges.backends.base import BackendError, CircuitBreaker, JudgeBackend, JudgeRequest, ResilientBackend
from judges.backends.openai import OpenAIBackend
from judges.backends.policy import JudgeSampling, PolicyBackend
from judges.backends.rules import RulesBackend

__all__ = [
    "BackendError",
    "CircuitBreaker",
    "JudgeBackend",
    "JudgeRequest",
    "JudgeSampling",
    "OpenAIBackend",
    "PolicyBackend",
    "ResilientBackend",
    "RulesBackend",
]
