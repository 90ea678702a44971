"""The decision log: what became of every judged turn, one JSON line each in the run's per-version logs.

A :class:`Decision` is the typed result of sample-making (:mod:`claw_train.samples.making`): the turn, its judgement,
the score its advantages were made from, the hint and teacher log-probs OPD used, the advantages, and the reason it
was masked (``None``: trained, with its sample id). :class:`DecisionLog` writes it (the prompt as the policy saw it,
and a trained sample's per-token credit, :mod:`claw_train.runlog.turn_text`); :func:`turn_record` is the line itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_train.advantages import MethodSettings
from claw_train.runlog.logs import VersionedLog
from claw_train.runlog.turn_text import prompt_piece, screenshot, token_credit
from claw_train.samples.records import TrainSample, TurnRecord
from judges.base import Judgement


@dataclass(frozen=True)
class Decision:
    """What became of one judged turn."""

    turn: TurnRecord
    judgement: Judgement | None
    reason: str | None
    """Why it is masked (``"no_signal"``, ``"judge_unavailable"``, ``"infra_<status>"``…); ``None``: it is trained."""
    score: float | None = None
    """The judge's score."""
    hint: str | None = None
    """The hint the OPD teacher was given (``None`` when no teacher log-probs were computed)."""
    teacher: list[float] | None = None
    """The teacher's log-probs of the turn's tokens."""
    rl_score: float | None = None
    """The score the advantages were made from (for general agents, normalised by step index)."""
    advantages: list[float] | None = None
    sample_id: str | None = None

    def sample(self, method: str) -> TrainSample:
        """The training sample of an accepted decision."""
        return TrainSample(
            self.turn, self.advantages, method, score=self.score, hint=self.hint, sample_id=self.sample_id
        )


class DecisionLog:
    """Writes each :class:`Decision` to the run's :class:`~claw_train.runlog.logs.VersionedLog` (the file of the
    policy version that made the turn); ``tokenizer`` (the policy's) adds the prompt and a trained sample's credit."""

    def __init__(self, log: VersionedLog, settings: MethodSettings, tokenizer: Any = None):
        self.log = log
        self.settings = settings
        self.tokenizer = tokenizer

    def write(self, decision: Decision) -> None:
        """Log one decision."""
        credit = None
        if decision.advantages is not None and self.tokenizer is not None:
            credit = token_credit(
                self.tokenizer,
                decision.turn,
                decision.advantages,
                method=self.settings.method,
                score=decision.rl_score,
                teacher=decision.teacher,
                w_rl=self.settings.w_rl,
                w_opd=self.settings.w_opd,
            )
        record = turn_record(
            decision.turn,
            decision.judgement,
            decision.advantages,
            decision.reason,
            decision.sample_id,
            tokenizer=self.tokenizer,
            credit=credit,
            image_dir=self.log.root / "images",
        )
        self.log.write(decision.turn.policy_version, record)


def turn_record(
    turn: TurnRecord,
    judgement: Judgement | None,
    adv: list[float] | None,
    reason: str | None,
    sample_id: str | None,
    *,
    tokenizer: Any = None,
    credit: dict[str, Any] | None = None,
    image_dir: Path | None = None,
) -> dict[str, Any]:
    """The log line of one judged turn: the action, its next state, the votes and hint, and the accept/mask decision;
    with the policy's ``tokenizer`` also the prompt as it saw it, and a trained sample's per-token ``credit``
    (:mod:`claw_train.turn_text`); with ``image_dir`` a GUI turn's screenshot is saved there."""
    ns = turn.next_state
    record: dict[str, Any] = {
        "kind": "turn",
        "episode": turn.episode_id,
        "group": turn.group_id,
        "task": turn.task_id,
        "step": turn.step_index,
        "version": turn.policy_version,
        "status": turn.status,
        "finish_reason": turn.finish_reason,
        "action": turn.action_text,
        "tokens": len(turn.completion_ids),
        "next_state": None
        if ns is None
        else {
            "text": ns.text,
            "role": ns.role,
            "evaluative": ns.evaluative.score,
            "directive": ns.directive,
            "outcome": ns.outcome,
        },
        "decision": "accepted" if reason is None else "masked",
        "reason": reason,
        "sample_id": sample_id,
    }
    if judgement is not None:
        record["judgement"] = judgement.to_dict()
        record["hint_accepted"] = judgement.hint is not None
    if adv is not None:
        record["advantage"] = {"mean": sum(adv) / len(adv), "min": min(adv), "max": max(adv)}
    if tokenizer is not None:
        record["prompt"] = prompt_piece(tokenizer, turn)
    if ns is not None and ns.image is not None and image_dir is not None:
        record["next_state"]["image"] = screenshot(image_dir, turn, ns.image)
    if credit is not None:
        record["credit"] = credit
    for key in ("judge_error", "teacher_error", "degenerate", "penalised"):
        if key in turn.info:
            record[key] = turn.info[key]
    return record
