"""Build a :class:`StepJudge` from a command-line spec: ``rules``, ``policy`` or ``openai://HOST:PORT[/v1]``."""

from __future__ import annotations

import os
from typing import Any

from claw_envs import FamilySpec, JudgeTemplates
from judges.backends.base import JudgeBackend
from judges.hint import HintJudge
from judges.metrics import JudgeMetrics
from judges.prm import PRMJudge
from judges.prompts import templates_for
from judges.step import StepJudge

MODEL_ENV = "CLAW_JUDGE_MODEL"
KEY_ENVS = ("CLAW_JUDGE_API_KEY", "OPENAI_API_KEY")


def make_backend(
    spec: str,
    *,
    directive_is_negative: bool = True,
    policy: Any = None,
    model: str | None = None,
    api_key: str | None = None,
    metrics: JudgeMetrics | None = None,
    **options: Any,
) -> JudgeBackend:
    """The backend a spec names. OpenAI endpoints take the model from ``model``, ``$CLAW_JUDGE_MODEL`` or
    ``"default"``, and the key from ``api_key``, ``$CLAW_JUDGE_API_KEY`` or ``$OPENAI_API_KEY``.

    ``options`` go to the model backends' constructors (``timeout``, ``retries``, ``backoff``,
    ``failure_threshold``, ``reset_after``; ``sampling_type`` for ``policy``).
    """
    spec = spec.strip()
    if spec == "rules":
        if options:
            raise ValueError(f"the rules judge takes no options, got {sorted(options)}")
        from judges.backends.rules import RulesBackend

        return RulesBackend(metrics, directive_is_negative=directive_is_negative)
    if spec == "policy":
        if policy is None:
            raise ValueError("the 'policy' judge needs the policy object (pass policy=...)")
        from judges.backends.policy import PolicyBackend

        return PolicyBackend(policy, metrics=metrics, **options)
    if spec.startswith(("openai://", "openai+https://", "http://", "https://")):
        from judges.backends.openai import OpenAIBackend

        model = model or os.environ.get(MODEL_ENV) or "default"
        api_key = api_key or next((os.environ[k] for k in KEY_ENVS if os.environ.get(k)), None)
        return OpenAIBackend(spec, model=model, api_key=api_key, metrics=metrics, **options)
    raise ValueError(f"unknown judge {spec!r}: use 'rules', 'policy' or 'openai://HOST:PORT[/v1]'")


def make_judge(
    spec: str,
    *,
    family: str | FamilySpec | JudgeTemplates,
    votes: int = 3,
    policy: Any = None,
    model: str | None = None,
    api_key: str | None = None,
    hints: bool = True,
    temperature: float = 0.6,
    max_tokens: int = 1024,
    **backend_options: Any,
) -> StepJudge:
    """A step judge for env ``family`` (a registered name, a spec, or templates): its templates, one backend.

    ``hints=False`` leaves out the hint judge (Binary RL needs only the score); ``backend_options`` go to
    :func:`make_backend`.
    """
    templates = templates_for(family)
    backend = make_backend(
        spec,
        directive_is_negative=templates.directive_is_negative,
        policy=policy,
        model=model,
        api_key=api_key,
        **backend_options,
    )
    sampling = {"votes": votes, "temperature": temperature, "max_tokens": max_tokens}
    prm = PRMJudge(backend, templates.prm, **sampling)
    hint = HintJudge(backend, templates.hint, **sampling) if hints else None
    return StepJudge(prm, hint)
