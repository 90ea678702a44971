"""One episode of a turn source, wherever it is played. An :class:`EpisodeRunner` plays episodes and sums each up
as an :class:`EpisodeReport`: :class:`LocalEpisodes` through an env pool in the trainer's process (its envs here or
env actors on a Ray cluster), :class:`~claw_train.pipeline.workers.RolloutWorkers` inside rollout workers on a Ray
cluster, whose reports and turns travel back to the trainer. :class:`StreamingAgent` hands each turn on as the env
answers it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from claw_train.agent_loop import EpisodeAgent
from claw_train.pipeline.budget import InFlightBudget, Slot
from claw_train.policy.base import Policy, PolicyError, SamplingParams
from claw_train.policy.guarded import PolicyDown
from claw_train.samples.records import TurnRecord

if TYPE_CHECKING:
    from claw_envs.pool import EnvPool

Emit = Callable[[TurnRecord], Awaitable[None]]


class StreamingAgent(EpisodeAgent):
    """An ``EpisodeAgent`` that hands each turn on as soon as the env has answered it; with a ``budget`` (a lone
    episode in this process) it takes an in-flight slot before generating each turn, which the turn carries on."""

    def __init__(self, *args: Any, emit: Emit, budget: InFlightBudget | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.emit = emit
        self.budget = budget
        self.emitted = 0
        self.error: PolicyError | None = None
        self._slots: deque[Slot] = deque()  # taken for generated turns not yet handed on, in order

    async def flush(self) -> None:
        """Emit the turns not yet handed on, in order, each with its slot."""
        while self.emitted < len(self.turns):
            turn = self.turns[self.emitted]
            turn.info.setdefault("tools", self.transcript.tools if self.transcript else None)
            turn.hold(self._slots.popleft() if self._slots else None)
            self.emitted += 1
            await self.emit(turn)

    async def __call__(self, obs: Any, info: Mapping[str, Any]) -> str:
        if self.transcript is not None:
            self.observe(0.0, info)
            await self.flush()
        if self.budget is not None:
            self._slots.append(await self.budget.take())
        try:
            return await super().__call__(obs, info)
        except PolicyError as err:
            if self.budget is not None:
                self._slots.pop().release()  # the turn that failed to generate holds no sample
            self.error = err
            raise

    def release_unheld(self) -> None:
        """Give back slots no handed-on turn carries (the episode was cancelled mid-generation)."""
        while self._slots:
            self._slots.popleft().release()


@dataclass
class EpisodeReport:
    """How an episode went: the turns it handed on, its status and outcome, or the policy error that ended it."""

    turns: int
    status: str = "ok"
    error: str | None = None
    outcome: float | None = None
    policy_error: str | None = None
    policy_down: bool = False  # the policy failed its health probe too: the run must stop
    acted: bool | None = None  # whether any step's action was carried out (NextState.action_taken); None: unknown

    def raised(self) -> PolicyError | None:
        """The policy error as the trainer's process handles it (``PolicyDown`` stops the run)."""
        if self.policy_error is None:
            return None
        return (PolicyDown if self.policy_down else PolicyError)(self.policy_error)


class EpisodeRunner(Protocol):
    """Where a run's episodes play (the turn sources' one way to play one)."""

    async def play_episode(
        self,
        sampling: SamplingParams,
        *,
        seed: int,
        options: dict[str, Any] | None,
        group_id: str,
        emit: Emit,
        budget: InFlightBudget | None = None,
    ) -> EpisodeReport:
        """One episode; each turn goes to ``emit``. With a ``budget`` (a lone episode) its turns take in-flight
        slots from it; without one (the episodes of a group) the caller gives them theirs."""
        ...

    async def aclose(self) -> None:
        """Close the envs (and workers)."""
        ...


class LocalEpisodes:
    """Episodes of ``pool`` (an :class:`~claw_envs.pool.EnvPool`) played by ``policy`` in this process."""

    def __init__(self, pool: EnvPool, policy: Policy):
        self.pool = pool
        self.policy = policy

    async def play_episode(
        self,
        sampling: SamplingParams,
        *,
        seed: int,
        options: dict[str, Any] | None,
        group_id: str,
        emit: Emit,
        budget: InFlightBudget | None = None,
    ) -> EpisodeReport:
        """Each turn goes to ``emit`` as the env answers it, the last one when the episode ends (masked as infra
        if the env never did)."""
        agent = StreamingAgent(self.policy, sampling, group_id=group_id, emit=emit, budget=budget)
        try:
            result = await self.pool.run_episode(agent, seed=seed, options=options)
            if (error := agent.error) is not None:
                down = isinstance(error, PolicyDown)
                return EpisodeReport(
                    len(agent.turns), "infra_failure", str(error), policy_error=str(error), policy_down=down
                )
            if agent.pending:
                if len(result.infos) == len(result.actions) + 1:  # the reset info, then one per step
                    agent.observe(result.rewards[-1] if result.rewards else 0.0, result.infos[-1])
                else:  # the env never answered this action (timeout, crash): recorded, then masked as infra
                    agent.abandon(result.status if result.status != "ok" else "infra_failure")
            await agent.flush()
        finally:
            agent.release_unheld()
        final = result.infos[-1].get("next_state") if result.infos else None
        outcome = final.outcome if final is not None else None
        states = [ns for info in result.infos if (ns := info.get("next_state")) is not None]
        acted = any(ns.action_taken for ns in states) if states else None
        return EpisodeReport(len(agent.turns), result.status, result.error, outcome, acted=acted)

    async def aclose(self) -> None:
        """Close the pool's envs."""
        await self.pool.aclose()
