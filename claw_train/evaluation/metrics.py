"""The numbers every evaluation reports: mean outcome, success rate (avg@k), unbiased pass@k, and their
percentile bootstrap intervals over tasks (how much the score would move on another draw of such tasks)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

BOOTSTRAP_RESAMPLES = 2000


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c right: 1 - C(n-c, k)/C(n, k) (Chen et al., 2021); needs n >= k."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def bootstrap_ci(values: Sequence[float], seed: int, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``values`` (resampling the values)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def summarize(records: Sequence[Mapping[str, Any]], k: int, seed: int = 0) -> dict[str, Any]:
    """Task-level metrics over episode records (``task_id``, ``outcome``, ``success``, ``status``).

    Records whose status is not ``ok`` (infrastructure failures) are left out and counted; k is lowered to
    the fewest graded samples any task has. ``failed_generations`` counts graded samples only. ``action_rate`` is
    the share of the graded episodes' turns the env carried out (``actions_carried_out`` of ``turns``: the policy
    wrote the family's action format), None for records without turns (graded response files).
    """
    graded: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        graded.setdefault(str(r["task_id"]), [])
        if r.get("status", "ok") == "ok":
            graded[str(r["task_id"])].append(r)
    counted = {t: rs for t, rs in graded.items() if rs}
    if not counted:
        raise ValueError("no task has a graded episode (every one failed)")
    k_eff = min(k, *(len(rs) for rs in counted.values()))
    outcomes = [statistics.fmean(_outcome(r) for r in rs) for rs in counted.values()]
    success = [sum(bool(r["success"]) for r in rs) / len(rs) for rs in counted.values()]
    passk = [pass_at_k(len(rs), sum(bool(r["success"]) for r in rs), k_eff) for rs in counted.values()]
    every = [_outcome(r) for rs in counted.values() for r in rs]
    scored = [r for rs in counted.values() for r in rs]
    turns = sum(int(r.get("turns", 0)) for r in scored)
    return {
        "tasks": len(counted),
        "tasks_without_samples": len(graded) - len(counted),
        "samples": len(every),
        "infra_failures": sum(r.get("status", "ok") != "ok" for r in records),
        # of the graded samples (those in the score), so "all of them" means every scored reply was empty
        "failed_generations": sum(bool(r.get("failed_generation")) for rs in counted.values() for r in rs),
        "k": k_eff,
        "k_requested": k,
        "score": statistics.fmean(outcomes),
        "score_sd": statistics.pstdev(every),
        "score_ci95": bootstrap_ci(outcomes, seed),
        "success_rate": statistics.fmean(success),
        "success_rate_ci95": bootstrap_ci(success, seed + 1),
        "pass_at_k": statistics.fmean(passk),
        "pass_at_k_ci95": bootstrap_ci(passk, seed + 2),
        # the format rate: of the policy's turns, those the env could carry out (a command ran, a call, an answer)
        "action_rate": sum(int(r.get("actions_carried_out", 0)) for r in scored) / turns if turns else None,
        "acting_episodes": sum(bool(r.get("actions_carried_out")) for r in scored) / len(scored),
    }


def _outcome(record: Mapping[str, Any]) -> float:
    value = record.get("outcome")
    return 0.0 if value is None else float(value)
