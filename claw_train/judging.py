"""From a turn to a training sample: judge it (PRM and hint at once), compute the OPD teacher log-probs and the
method's advantages, mask what carries no gradient, and log every decision.

A turn is masked (no sample; counted by reason, logged with its votes) when its env step failed
(``infra_<status>``), it has no next state or no tokens, the judge could not answer
(``judge_unavailable`` / ``judge_error``), or it carries no signal (PRM 0 and no hint, or, for general
agents, a constant step-index bucket: ``no_signal``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claw_train.advantages import MethodSettings, StepReward, group_scores
from claw_train.logs import VersionedLog
from claw_train.metrics import Stats
from claw_train.policy.base import Policy, PolicyError
from claw_train.records import TrainSample, TurnRecord
from claw_train.turn_text import prompt_piece, screenshot, token_credit
from judges.base import Judge


class SampleMaker:
    """Judges turns and turns them into :class:`TrainSample`s (personal track: one turn at a time; general
    agents: a group of episodes of one task, for step-index normalisation).

    ``fatal(err)`` decides whether a policy error while computing teacher log-probs ends the run (it is
    re-raised) or only loses that hint (counted as ``teacher_errors``).
    """

    def __init__(
        self,
        *,
        settings: MethodSettings,
        judge: Judge,
        policy: Policy | None,
        stats: Stats,
        log: VersionedLog,
        attempt: int = 0,
        temperature: float = 1.0,
        fatal: Callable[[PolicyError], bool] = lambda err: False,
    ):
        self.settings = settings
        self.judge = judge
        self.policy = policy
        self.stats = stats
        self.log = log
        self.attempt = attempt
        self.temperature = temperature
        self.fatal = fatal
        self._sample_no = 0

    async def _judgement(self, turn: TurnRecord) -> Any:
        try:
            return await self.judge.judge(turn.action_text, turn.next_state, turn.messages)
        except Exception as err:  # a judge must never take the pipeline down
            self.stats.add("judge_errors")
            turn.info["judge_error"] = f"{type(err).__name__}: {err}"
            return None

    async def _teacher_logprobs(self, turn: TurnRecord, hint: str | None) -> list[float] | None:
        """``log π(a_t | s + hint)`` over the turn's generated tokens (a prefill on the serving policy)."""
        if hint is None or not self.settings.uses_hints:
            return None
        from claw_envs.messages import hinted_messages
        from claw_train.policy.render import render_prompt

        try:
            ids = render_prompt(
                self.policy.tokenizer, hinted_messages(turn.messages, hint), tools=turn.info.get("tools")
            )
            kwargs = {"temperature": self.temperature} if self.temperature != 1.0 else {}
            return await self.policy.logprobs(ids, turn.completion_ids, **kwargs)
        except PolicyError as err:
            if self.fatal(err):
                raise
            self.stats.add("teacher_errors")
            turn.info["teacher_error"] = str(err)
        return None

    def _usable(self, turn: TurnRecord) -> str | None:
        """Why a turn cannot be learned from before judging (``None``: it can)."""
        if turn.status != "ok":
            return f"infra_{turn.status}"
        if turn.next_state is None:
            return "no_next_state"
        if not turn.completion_ids:
            return "empty_completion"
        return None

    async def personal(self, turn: TurnRecord) -> list[TrainSample]:
        """The personal track: one turn, its PRM score and hint → at most one sample."""
        reason = self._usable(turn)
        judgement = None if reason else await self._judgement(turn)
        if reason is None and judgement is None:
            reason = "judge_error"
        score = hint = teacher = None
        if judgement is not None:
            self._count_judgement(judgement)
            score = judgement.score if judgement.available else None
            hint = judgement.hint if judgement.hint_available else None
            teacher = await self._teacher_logprobs(turn, hint)
        adv = None
        if reason is None:
            adv = self.settings.advantages(
                len(turn.completion_ids), score=score, teacher_logprobs=teacher, old_logprobs=turn.logprobs
            )
            if adv is None:
                reason = "judge_unavailable" if judgement is not None and not judgement.available else "no_signal"
        return self._emit(
            [(turn, adv, score, hint if teacher is not None else None, judgement, reason, teacher, score)]
        )

    async def group(self, episodes: list[list[TurnRecord]]) -> list[TrainSample]:
        """General agents: the episodes of one task group; ``r = outcome + c·prm`` normalised by step index."""
        turns = [t for ep in episodes for t in ep]
        reasons = [self._usable(t) for t in turns]
        judgements = await asyncio.gather(
            *(self._judgement(t) if r is None else _none() for t, r in zip(turns, reasons, strict=True))
        )
        steps: list[StepReward | None] = []
        k = 0
        for ep in episodes:
            outcome = next(
                (t.next_state.outcome for t in reversed(ep) if t.next_state and t.next_state.outcome is not None), None
            )
            for t in ep:
                j = judgements[k]
                if j is not None:
                    self._count_judgement(j)
                if reasons[k] is None and (j is None or not j.available):
                    reasons[k] = "judge_unavailable" if j is not None else "judge_error"
                judged = reasons[k] is None
                steps.append(
                    StepReward(t.group_id, t.step_index, float(outcome or 0.0), float(j.score)) if judged else None
                )
                k += 1
        norm = group_scores(steps, c=self.settings.prm_c)
        hints = [j.hint if j is not None and j.hint_available else None for j in judgements]
        teachers = await asyncio.gather(
            *(
                self._teacher_logprobs(t, h) if reasons[k] is None else _none()
                for k, (t, h) in enumerate(zip(turns, hints, strict=True))
            )
        )
        rows = []
        for k, t in enumerate(turns):
            adv = None
            if reasons[k] is None:
                adv = self.settings.advantages(
                    len(t.completion_ids), score=norm[k], teacher_logprobs=teachers[k], old_logprobs=t.logprobs
                )
                if adv is None:
                    reasons[k] = "no_signal"
            score = judgements[k].score if judgements[k] is not None else None
            hint = hints[k] if teachers[k] is not None else None
            rows.append((t, adv, score, hint, judgements[k], reasons[k], teachers[k], norm[k]))
        return self._emit(rows)

    def _count_judgement(self, j: Any) -> None:
        self.stats.add("judged")
        if not j.available:
            self.stats.add("judge_unavailable")
        else:
            self.stats.score(j.score)
        if j.hint is not None:
            self.stats.add("hints")

    def _emit(self, rows: list[tuple[TurnRecord, Any, Any, Any, Any, str | None, Any, Any]]) -> list[TrainSample]:
        """Log every judged turn with its decision (and a trained sample's per-token credit); return the accepted
        samples (with fresh ids). A row: turn, advantages, score, hint, judgement, reason, teacher log-probs, and the
        score the advantages were made from."""
        out = []
        tokenizer = getattr(self.policy, "tokenizer", None)
        for turn, adv, score, hint, judgement, reason, teacher, rl_score in rows:
            sample_id = None
            if reason is None:
                self._sample_no += 1
                sample_id = f"a{self.attempt}-{self._sample_no:07d}"
                out.append(TrainSample(turn, adv, self.settings.method, score=score, hint=hint, sample_id=sample_id))
                self.stats.add("samples")
            else:
                self.stats.mask(reason)
            credit = None
            if adv is not None and tokenizer is not None:
                credit = token_credit(
                    tokenizer,
                    turn,
                    adv,
                    method=self.settings.method,
                    score=rl_score,
                    teacher=teacher,
                    w_rl=self.settings.w_rl,
                    w_opd=self.settings.w_opd,
                )
            images = self.log.root / "images"
            record = turn_record(
                turn, judgement, adv, reason, sample_id, tokenizer=tokenizer, credit=credit, image_dir=images
            )
            self.log.write(turn.policy_version, record)
            self.stats.logged(turn.episode_id)
        return out


def turn_record(
    turn: TurnRecord,
    judgement: Any,
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
        record["judgement"] = judgement.to_dict() if hasattr(judgement, "to_dict") else repr(judgement)
        record["hint_accepted"] = judgement.hint is not None
    if adv is not None:
        record["advantage"] = {"mean": sum(adv) / len(adv), "min": min(adv), "max": max(adv)}
    if tokenizer is not None:
        record["prompt"] = prompt_piece(tokenizer, turn)
    if ns is not None and ns.image is not None and image_dir is not None:
        record["next_state"]["image"] = screenshot(image_dir, turn, ns.image)
    if credit is not None:
        record["credit"] = credit
    for key in ("judge_error", "teacher_error"):
        if key in turn.info:
            record[key] = turn.info[key]
    return record


async def _none() -> None:
    return None
