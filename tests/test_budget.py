"""The in-flight budget has one owner per slot (issue #26): every turn carries the slot it was generated under and
whoever ends its way releases it, exactly once. Runs that take every path — trained, masked, dropped as stale,
a generation that failed, an env step that never answered, rollouts cancelled when the run ends — must end with
the budget's books balanced: nothing outstanding, nothing released twice."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("trl")

import claw_envs
from claw_envs import FamilySpec, InfraFailure, StepStatus
from claw_envs.echo.env import EchoEnv
from claw_train.options.resolve import build
from claw_train.options.tree import TrainArgs
from claw_train.pipeline import Pipeline
from claw_train.pipeline.budget import InFlightBudget
from claw_train.policy.base import Policy, PolicyError

FAST = {"max_new_tokens": 8, "eval_every": 0, "report_to": "none", "samples_per_step": 4}


def test_slots_and_allotments_keep_the_books():
    async def main() -> list[dict[str, int]]:
        budget = InFlightBudget(4, allotment=3)
        one = await budget.take()
        group = await budget.take_allotment()
        a, b = group.slot(), group.slot()
        group.close()  # the third slot was not used: back at once
        books = [budget.books()]
        for slot in (one, a, b):
            slot.release()
        a.release()  # a second release is counted and changes nothing
        group.close()
        books.append(budget.books())
        books.append({"available": budget.available})
        return books

    during, after, free = asyncio.run(main())
    assert during == {"taken": 4, "released": 1, "outstanding": 3, "double_frees": 0}
    assert after == {"taken": 4, "released": 4, "outstanding": 0, "double_frees": 1}
    assert free == {"available": 4}


def test_a_group_cancelled_while_waiting_for_its_allotment_takes_nothing():
    async def main() -> dict[str, int]:
        budget = InFlightBudget(2, allotment=2)
        held = await budget.take()
        waiting = asyncio.ensure_future(budget.take_allotment())
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        held.release()
        return budget.books() | {"available": budget.available}

    assert asyncio.run(main()) == {"taken": 1, "released": 1, "outstanding": 0, "double_frees": 0, "available": 2}


class FlakyEcho(EchoEnv):
    """The echo env whose sandbox dies on every third step (an action the env never answers)."""

    steps = 0

    async def _act(self, action):
        FlakyEcho.steps += 1
        if FlakyEcho.steps % 3 == 0:
            raise InfraFailure("the sandbox died mid-step", StepStatus.SANDBOX_FAILURE)
        return await super()._act(action)


class FailingEvery(Policy):
    """``inner``, whose every ``n``-th generation fails (its one-token health probe still answers)."""

    def __init__(self, inner: Policy, n: int):
        self.inner, self.n, self.calls = inner, n, 0
        self.tokenizer = inner.tokenizer

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.inner.version

    async def generate(self, prompt, sampling, **kw):
        if len(prompt) > 1:
            self.calls += 1
            if self.calls % self.n == 0:
                raise PolicyError("the model ran out of memory (injected)")
        return await self.inner.generate(prompt, sampling, **kw)

    async def logprobs(self, prompt_ids, completion_ids, **kw):
        return await self.inner.logprobs(prompt_ids, completion_ids, **kw)

    def publish(self, weights, version):
        self.inner.publish(weights, version)

    async def aclose(self):
        await self.inner.aclose()


class UnavailableEvery:
    """The rules judge, whose every ``n``-th verdict is unavailable (the turn is masked: ``judge_unavailable``)."""

    def __init__(self, family: str, n: int):
        from judges import make_judge

        self.inner, self.n, self.calls = make_judge("rules", family=family, votes=1), n, 0

    async def judge(self, action, next_state, messages=None):
        from judges.base import Judgement

        self.calls += 1
        if self.calls % self.n == 0:
            return Judgement(score=0.0, available=False)
        return await self.inner.judge(action, next_state, messages)

    def metrics_dict(self):
        return self.inner.metrics_dict()

    async def reachable(self):
        return None

    async def aclose(self):
        await self.inner.aclose()


def _run(args: TrainArgs, model: str) -> object:
    from claw_train.policy.inprocess import InProcessPolicy

    policy = FailingEvery(InProcessPolicy(model), n=5)
    judge = UnavailableEvery(args.run.env, n=4)
    return asyncio.run(asyncio.wait_for(Pipeline(args, policy=policy, judge=judge, model_path=model).run(), 240))


def _balanced(result) -> None:
    books = result.counters["in_flight"]
    assert books["taken"] > 0
    assert books["outstanding"] == 0, f"slots leaked: {books}"
    assert books["double_frees"] == 0, f"slots released twice: {books}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_path_of_a_lone_turn_gives_its_slot_back(tmp_path):
    from claw_train.models.tiny import bootstrap

    model = str(bootstrap("conversation", steps=2, progress=False))
    args = build(
        TrainArgs, command="train", env="conversation", model=model, updates=3, output_dir=tmp_path / "run",
        in_flight_batches=2, max_staleness=0, rollout_workers=4, **FAST,
    )  # fmt: skip
    result = _run(args, model)
    assert result.status == "done", result.message
    counts = result.counters["counts"]
    assert result.counters["trainer"]["stale_dropped"] > 0  # dropped by the trainer as stale
    assert counts.get("masked", 0) > 0 and counts.get("samples", 0) > 0  # masked by the judges, and trained
    assert counts.get("generation_errors", 0) > 0  # generations that failed
    _balanced(result)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_path_of_a_group_gives_its_slots_back(tmp_path):
    from claw_train.models.tiny import bootstrap

    spec = FamilySpec(name="flakyecho", env_id="claw/FlakyEcho-v0", entry_point="test_budget:FlakyEcho")
    claw_envs.register(spec)
    try:
        model = str(bootstrap("echo", steps=2, progress=False))
        args = build(
            TrainArgs, command="train", env="flakyecho", model=model, updates=2, output_dir=tmp_path / "run",
            group_size=2, rollout_workers=2, max_turns=3, **FAST,
        )  # fmt: skip
        result = _run(args, model)
    finally:
        claw_envs.registry.unregister(spec.env_id)
    assert result.status == "done", result.message
    counts, masked = result.counters["counts"], result.counters["masked"]
    assert masked.get("infra_sandbox_failure", 0) > 0  # the env never answered: recorded, masked as infra
    assert counts.get("generation_errors", 0) > 0 and counts.get("samples", 0) > 0
    _balanced(result)
