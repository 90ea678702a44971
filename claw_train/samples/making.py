"""From turns to training samples, in three steps: **judge** each turn (PRM and hint at once), **normalise** the
scores (general agents: ``outcome + c·prm`` by task group and step index; personal: the score as it is), and
**decide** (the OPD teacher log-probs, the method's advantages, or the reason the turn is masked). Every judged turn
becomes a :class:`Decision`; the accepted ones become :class:`~claw_train.samples.records.TrainSample`\\ s, and all
of them go to the run's :class:`~claw_train.runlog.decisions.DecisionLog`.

A turn is masked (no sample; counted by reason, logged with its votes) when its env step failed
(``infra_<status>``), it has no next state or no tokens, it is degenerate and the run drops those (``cut_off`` at
the token limit, ``repetitive``: :mod:`claw_train.samples.degenerate`; by default such a turn is not masked but
penalised: the judge's score is replaced by -1, its hint still teaches), the judge could not answer
(``judge_unavailable`` / ``judge_error``), or it carries no signal (PRM 0 and no hint, or, for general
agents, a constant step-index bucket: ``no_signal``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from claw_train.advantages import MethodSettings, StepReward, group_scores
from claw_train.policy.base import Policy, PolicyError
from claw_train.runlog.decisions import Decision, DecisionLog
from claw_train.runlog.metrics import Stats
from claw_train.samples.degenerate import PENALTY, Handling, degenerate, mark_repeated_failures
from claw_train.samples.records import TrainSample, TurnRecord
from judges.base import Judge, Judgement


@dataclass(frozen=True)
class Judged:
    """Step one's result for a turn: its judgement (``None`` when the judge failed or was not asked), why it cannot
    be learned from (``None``: it can, so far), and whether it is a degenerate turn the run penalises."""

    turn: TurnRecord
    judgement: Judgement | None
    reason: str | None
    penalised: bool = False

    @property
    def score(self) -> float | None:
        """The judge's score when it gave one (:data:`~claw_train.samples.degenerate.PENALTY` in its place for a
        penalised turn)."""
        if self.judgement is None or not self.judgement.available:
            return None
        return PENALTY if self.penalised else self.judgement.score

    @property
    def hint(self) -> str | None:
        """The accepted hint, when there is one."""
        j = self.judgement
        return j.hint if j is not None and j.hint_available else None


class SampleMaker:
    """Judges turns and turns them into :class:`TrainSample`\\ s (personal track: one turn at a time; general agents:
    a group of episodes of one task, for step-index normalisation), logging each :class:`Decision`.

    ``fatal(err)`` decides whether a policy error while computing teacher log-probs ends the run (it is
    re-raised) or only loses that hint (counted as ``teacher_errors``). ``degenerate`` says what becomes of a cut-off
    or repetitive turn (:data:`~claw_train.samples.degenerate.HANDLING`).
    """

    def __init__(
        self,
        *,
        settings: MethodSettings,
        judge: Judge,
        policy: Policy | None,
        stats: Stats,
        log: DecisionLog,
        attempt: int = 0,
        temperature: float = 1.0,
        fatal: Callable[[PolicyError], bool] = lambda err: False,
        degenerate: Handling = "penalise",
    ):
        self.settings = settings
        self.judge = judge
        self.policy = policy
        self.stats = stats
        self.log = log
        self.attempt = attempt
        self.temperature = temperature
        self.fatal = fatal
        self.degenerate = degenerate
        self._sample_no = 0

    async def personal(self, turn: TurnRecord) -> list[TrainSample]:
        """The personal track: one turn, its PRM score and hint → at most one sample."""
        (judged,) = await self._judge([turn], scored=False)
        return await self._decide([judged], [judged.score])

    async def group(self, episodes: Sequence[Sequence[TurnRecord]]) -> list[TrainSample]:
        """General agents: the episodes of one task group; ``r = outcome + c·prm`` normalised by step index (an action
        repeated after it failed is degenerate, :func:`~claw_train.samples.degenerate.mark_repeated_failures`)."""
        for episode in episodes:
            mark_repeated_failures(episode)
        judged = await self._judge([t for ep in episodes for t in ep], scored=True)
        outcomes = [_outcome(ep) for ep in episodes for _ in ep]
        steps = [
            StepReward(j.turn.group_id, j.turn.step_index, outcome, j.score)
            if j.reason is None and j.score is not None
            else None
            for j, outcome in zip(judged, outcomes, strict=True)
        ]
        return await self._decide(judged, group_scores(steps, c=self.settings.prm_c))

    # -- step one: judge --------------------------------------------------------------------------

    async def _judge(self, turns: list[TurnRecord], *, scored: bool) -> list[Judged]:
        """Each turn with its judgement, or the reason it is not judged (or the judge failed on it). ``scored``: a
        judgement without a score masks the turn (general agents normalise scores); else its hint may still teach."""
        reasons = [_unusable(t) for t in turns]
        for i, turn in enumerate(turns):
            if reasons[i] is None and (kind := degenerate(turn)) is not None:
                turn.info["degenerate"] = kind
                self.stats.add(f"degenerate_{kind}")
                reasons[i] = kind if self.degenerate == "drop" else None
                if self.degenerate == "penalise":
                    turn.info["penalised"] = True
        judgements = await asyncio.gather(
            *(self._judgement(t) if r is None else _nothing() for t, r in zip(turns, reasons, strict=True))
        )
        out = []
        for turn, reason, judgement in zip(turns, reasons, judgements, strict=True):
            if judgement is not None:
                self._count(judgement)
            if reason is None and judgement is None:
                reason = "judge_error"
            elif reason is None and scored and not judgement.available:
                reason = "judge_unavailable"
            out.append(Judged(turn, judgement, reason, penalised="penalised" in turn.info))
        return out

    async def _judgement(self, turn: TurnRecord) -> Judgement | None:
        try:
            return await self.judge.judge(turn.action_text, turn.next_state, turn.messages)
        except Exception as err:  # a judge must never take the pipeline down
            self.stats.add("judge_errors")
            turn.info["judge_error"] = f"{type(err).__name__}: {err}"
            return None

    def _count(self, j: Judgement) -> None:
        self.stats.add("judged")
        if not j.available:
            self.stats.add("judge_unavailable")
        else:
            self.stats.score(j.score)
        if j.hint is not None:
            self.stats.add("hints")

    # -- step three: decide -----------------------------------------------------------------------

    async def _decide(self, judged: list[Judged], rl_scores: Sequence[float | None]) -> list[TrainSample]:
        """Teacher log-probs and advantages for the judged turns (``rl_scores``: the score each turn's advantages are
        made from), a :class:`Decision` for every turn, logged; returns the accepted samples."""
        teachers = await asyncio.gather(
            *(self._teacher_logprobs(j.turn, j.hint) if j.reason is None else _nothing() for j in judged)
        )
        samples = []
        for j, rl_score, teacher in zip(judged, rl_scores, teachers, strict=True):
            decision = self._decision(j, rl_score, teacher)
            if decision.reason is None:
                self._sample_no += 1
                decision = replace(decision, sample_id=f"a{self.attempt}-{self._sample_no:07d}")
                samples.append(decision.sample(self.settings.method))
                self.stats.add("samples")
            else:
                self.stats.mask(decision.reason)
            self.log.write(decision)
            self.stats.logged(j.turn.episode_id)
        return samples

    def _decision(self, j: Judged, rl_score: float | None, teacher: list[float] | None) -> Decision:
        advantages, reason = None, j.reason
        if reason is None:
            advantages = self.settings.advantages(
                len(j.turn.completion_ids), score=rl_score, teacher_logprobs=teacher, old_logprobs=j.turn.logprobs
            )
            if advantages is None:
                unscored = j.judgement is not None and not j.judgement.available
                reason = "judge_unavailable" if unscored else "no_signal"
        return Decision(
            turn=j.turn,
            judgement=j.judgement,
            reason=reason,
            score=j.score if j.judgement is not None and j.judgement.available else None,
            hint=j.hint if teacher is not None else None,
            teacher=teacher,
            rl_score=rl_score,
            advantages=advantages,
        )

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


def _unusable(turn: TurnRecord) -> str | None:
    """Why a turn cannot be learned from before judging (``None``: it can)."""
    if turn.status != "ok":
        return f"infra_{turn.status}"
    if turn.next_state is None:
        return "no_next_state"
    if not turn.completion_ids:
        return "empty_completion"
    return None


def _outcome(episode: Sequence[TurnRecord]) -> float:
    """The episode's outcome: the last one a next state carries, 0 when none does."""
    return next(
        (float(t.next_state.outcome) for t in reversed(episode) if t.next_state and t.next_state.outcome is not None),
        0.0,
    )


async def _nothing() -> None:
    return None
