"""Advantages for the three learning methods, as pure functions on plain numbers.

* **Binary RL**: the PRM's majority score is the advantage of every response token (no group
  normalisation).
* **OPD** (on-policy distillation): ``A_t = log π_teacher(a_t | s + hint) − log π_old(a_t | s)``.
* **Combined**: ``A_t = w_rl·r + w_opd·(teacher_t − old_t)``; a turn with only a score or only a hint
  contributes what it has.
* **General agents**: ``r_{i,k} = outcome_i + c·prm_{i,k}``, normalised per (task group, step index):
  ``Â = (r − μ) / (σ + 1e-6)`` with population σ; a bucket whose rewards are all equal gives no
  gradient (dropped); a bucket of one keeps its raw ``r``.

``None`` always means "no gradient": the caller masks the sample instead of learning a zero.

This module is the one definition of a learning method: its name (:data:`Method`, :data:`METHODS`), its settings
(:class:`MethodSettings`, what ``--method``, ``--w-rl``, ``--w-opd`` and ``--prm-c`` set), its per-turn formula
(:func:`method_advantages`) and the agent track's normalisation of a task group (:func:`group_scores`).
"""

from __future__ import annotations

import math
import typing
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Method = Literal["binary", "opd", "combined"]
METHODS: tuple[str, ...] = typing.get_args(Method)
NORM_EPS = 1e-6


@dataclass(frozen=True)
class MethodSettings:
    """A learning method and its weights: ``A_t = w_rl·r + w_opd·(teacher_t − old_t)``; agent track
    ``r = outcome + prm_c·prm``."""

    method: str = "combined"
    w_rl: float = 1.0
    w_opd: float = 1.0
    prm_c: float = 1.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")

    @property
    def uses_hints(self) -> bool:
        """Whether the method learns from hints (OPD's teacher); Binary RL ignores them."""
        return self.method != "binary"

    def advantages(
        self,
        n_tokens: int,
        *,
        score: float | None,
        teacher_logprobs: Sequence[float] | None,
        old_logprobs: Sequence[float],
    ) -> list[float] | None:
        """One turn's per-token advantages under this method (``None``: no gradient)."""
        return method_advantages(
            self.method,
            n_tokens,
            score=score,
            teacher_logprobs=teacher_logprobs,
            old_logprobs=old_logprobs,
            w_rl=self.w_rl,
            w_opd=self.w_opd,
        )


def binary_advantages(score: float | None, n_tokens: int) -> list[float] | None:
    """The PRM score as the advantage of each of ``n_tokens``; ``None`` when it carries no gradient (0 or missing)."""
    if score is None or score == 0 or n_tokens <= 0 or not math.isfinite(score):
        return None
    return [float(score)] * n_tokens


def opd_advantages(teacher_logprobs: Sequence[float], old_logprobs: Sequence[float]) -> list[float]:
    """Per-token ``teacher_t − old_t`` (both over exactly the generated tokens)."""
    if len(teacher_logprobs) != len(old_logprobs):
        raise ValueError(f"teacher has {len(teacher_logprobs)} log-probs, the behaviour policy {len(old_logprobs)}")
    return [float(t) - float(o) for t, o in zip(teacher_logprobs, old_logprobs, strict=True)]


def combined_advantages(
    n_tokens: int,
    *,
    score: float | None = None,
    teacher_logprobs: Sequence[float] | None = None,
    old_logprobs: Sequence[float] | None = None,
    w_rl: float = 1.0,
    w_opd: float = 1.0,
) -> list[float] | None:
    """``w_rl·r + w_opd·(teacher − old)`` per token; either part may be missing; ``None`` if neither carries signal."""
    parts: list[np.ndarray] = []
    rl = binary_advantages(score, n_tokens)
    if rl is not None and w_rl != 0:
        parts.append(w_rl * np.asarray(rl))
    if teacher_logprobs is not None:
        if old_logprobs is None:
            raise ValueError("OPD needs the behaviour log-probs beside the teacher's")
        gap = np.asarray(opd_advantages(teacher_logprobs, old_logprobs))
        if len(gap) != n_tokens:
            raise ValueError(f"OPD gap has {len(gap)} tokens, the completion {n_tokens}")
        if w_opd != 0 and np.isfinite(gap).all():
            parts.append(w_opd * gap)
    if not parts:
        return None
    return [float(x) for x in np.sum(parts, axis=0)]


def method_advantages(
    method: str,
    n_tokens: int,
    *,
    score: float | None,
    teacher_logprobs: Sequence[float] | None,
    old_logprobs: Sequence[float],
    w_rl: float = 1.0,
    w_opd: float = 1.0,
) -> list[float] | None:
    """Advantages of one turn for ``method`` (binary ignores the hint, opd ignores the score)."""
    if method == "binary":
        return combined_advantages(n_tokens, score=score, w_rl=w_rl)
    if method == "opd":
        return combined_advantages(n_tokens, teacher_logprobs=teacher_logprobs, old_logprobs=old_logprobs, w_opd=w_opd)
    if method == "combined":
        return combined_advantages(
            n_tokens, score=score, teacher_logprobs=teacher_logprobs, old_logprobs=old_logprobs, w_rl=w_rl, w_opd=w_opd
        )
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


@dataclass(frozen=True)
class StepReward:
    """One step ``k`` of rollout ``i`` in task group ``group``: its outcome and per-step PRM score."""

    group: Hashable
    step_index: int
    outcome: float
    prm: float = 0.0


def step_reward(outcome: float, prm: float, c: float = 1.0) -> float:
    """``r_{i,k} = outcome_i + c·prm_{i,k}``."""
    return float(outcome) + c * float(prm)


def step_index_normalise(steps: Sequence[StepReward], c: float = 1.0) -> list[float | None]:
    """Normalise ``outcome + c·prm`` within each (group, step index) bucket, in input order.

    Population σ; ``(r − μ)/(σ + 1e-6)``; ``None`` for every member of a bucket of ≥ 2 equal rewards
    (no gradient); a bucket of one keeps its raw reward.
    """
    rewards = [step_reward(s.outcome, s.prm, c) for s in steps]
    buckets: dict[tuple[Hashable, int], list[int]] = defaultdict(list)
    for i, s in enumerate(steps):
        buckets[(s.group, s.step_index)].append(i)
    out: list[float | None] = [None] * len(steps)
    for members in buckets.values():
        values = np.asarray([rewards[i] for i in members], dtype=np.float64)
        if len(members) == 1:
            out[members[0]] = float(values[0])
            continue
        if np.all(values == values[0]):
            continue
        mu, sigma = values.mean(), values.std()
        for i, v in zip(members, values, strict=True):
            out[i] = float((v - mu) / (sigma + NORM_EPS))
    return out


def group_scores(steps: Sequence[StepReward | None], c: float = 1.0) -> list[float | None]:
    """The agent track's per-turn score of a task group: each judged step's ``outcome + c·prm`` normalised by
    (group, step index) (:func:`step_index_normalise`); ``None`` for a step that was not judged (``None`` in) or whose
    bucket carries no gradient."""
    judged = [(k, s) for k, s in enumerate(steps) if s is not None]
    normalised = step_index_normalise([s for _, s in judged], c=c)
    out: list[float | None] = [None] * len(steps)
    for (k, _), value in zip(judged, normalised, strict=True):
        out[k] = value
    return out
