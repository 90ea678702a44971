"""Held-out evaluation for every env family: :func:`evaluate` (the generic evaluator, extended by the family's
:class:`~claw_envs.evaluation.Evaluation`), the metrics, and ``claw-eval``'s body (:func:`run`)."""

from claw_train.evaluation.metrics import bootstrap_ci, pass_at_k, summarize
from claw_train.evaluation.runner import EvalReport, evaluate, extension_for, grade_file, write_report

__all__ = [
    "EvalReport",
    "bootstrap_ci",
    "evaluate",
    "extension_for",
    "grade_file",
    "pass_at_k",
    "summarize",
    "write_report",
]
